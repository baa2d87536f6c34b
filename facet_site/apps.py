"""The facet_site app: the site's own models (API tokens), commands and template tags."""
from django.apps import AppConfig


class FacetSiteConfig(AppConfig):
    name = "facet_site"
    verbose_name = "facet"
