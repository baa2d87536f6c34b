"""`facet reclassify`: classify every current skill again with the trained classifier, so a new
model or labelled set reaches skills already stored. Reviewer overrides are kept. `facet
refilter` is the same command over `refresh.refilter`."""
from django.core.management.base import BaseCommand

from skills import refresh


class Command(BaseCommand):
    help = "Re-run category classification over the stored corpus (reviewer overrides are kept) and summarise what changed."
    action = "reclassify"  # the function of skills.refresh that does the work

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Report what would change without saving.")

    def handle(self, *args, dry_run=False, **options):
        summary = getattr(refresh, self.action)(dry_run=dry_run)
        self.stdout.write(refresh.describe(self.action, summary, dry_run=dry_run))
