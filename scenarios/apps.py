"""The scenarios app: synthesis runs and the scenario–skill repository they build."""
from django.apps import AppConfig


class ScenariosConfig(AppConfig):
    name = "scenarios"
    verbose_name = "Scenarios"
