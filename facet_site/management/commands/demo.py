from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from facet_site.services import ensure_user
from skills import services as skill_services
from skills.models import Skill

DEMO_CORPUS = Path(settings.BASE_DIR) / "skills" / "demo_corpus"
DEMO_USERS = [
    ("admin", "facet-admin", "admin"),
    ("reviewer", "facet-reviewer", "reviewer"),
    ("viewer", "facet-viewer", "viewer"),
]


class Command(BaseCommand):
    help = "Prepare the demo: users for every role and the bundled demo corpus ingested (idempotent)."

    def handle(self, *args, **options):
        for username, password, role in DEMO_USERS:
            ensure_user(username=username, password=password, role=role)
        before = Skill.objects.count()
        batch = skill_services.ingest_path(DEMO_CORPUS, label="demo-corpus")
        self.stdout.write(f"Demo corpus: {batch.message} ({Skill.objects.count() - before} new rows).")
        self.stdout.write(self.style.SUCCESS("\nfacet is ready at http://127.0.0.1:8000"))
        for username, password, role in DEMO_USERS:
            self.stdout.write(f"  {role:<9} login: {username} / {password}")
