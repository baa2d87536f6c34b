"""The skills app: the ingested, filtered and classified skill corpus."""
from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills"
