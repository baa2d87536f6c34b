"""The URL map: the home page, login, tokens, the API root and each app's pages."""
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import prompt_views, views
from .login import ThrottledLoginView
from .api import api

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon),
    path("login/", ThrottledLoginView.as_view(template_name="login.html", redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.revoke_token, name="revoke-token"),
    path("prompts/", prompt_views.prompt_list, name="prompts"),
    path("prompts/<str:stage>/", prompt_views.prompt_detail, name="prompt"),
    path("skills/", include("skills.urls")),
    path("", include("scenarios.urls")),  # runs/ and repository/
    path("tasks/", include("tasks.urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]
