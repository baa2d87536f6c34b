from django.apps import AppConfig


class FacetSiteConfig(AppConfig):
    name = "facet_site"
    verbose_name = "facet"
