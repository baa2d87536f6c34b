"""`facet setup_roles`: create the admin, lead, reviewer and viewer groups."""
from django.core.management.base import BaseCommand

from facet_site.services import ensure_roles


class Command(BaseCommand):
    help = "Create the admin, lead, reviewer and viewer groups (idempotent)."

    def handle(self, *args, **options):
        ensure_roles()
        self.stdout.write("Roles ready: admin, lead, reviewer, viewer.")
