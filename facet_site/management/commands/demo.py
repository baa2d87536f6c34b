from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from facet_site.services import ensure_user
from skills import services as skill_services
from skills.models import Skill

DEMO_CASSETTE = Path(settings.BASE_DIR) / "scenarios" / "fixtures" / "demo.cassette.jsonl"

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
        self.synthesis_run()
        self.stdout.write(self.style.SUCCESS("\nfacet is ready at http://127.0.0.1:8000"))
        for username, password, role in DEMO_USERS:
            self.stdout.write(f"  {role:<9} login: {username} / {password}")

    def synthesis_run(self):
        """A synthesis run over the demo corpus, replayed from the bundled cassette (no LLM endpoint needed)."""
        from scenarios import services as run_services
        from scenarios.models import RunStatus, SynthesisRun

        existing = SynthesisRun.objects.filter(name="demo", status=RunStatus.SUCCEEDED).first()
        if existing:
            self.stdout.write(f"Synthesis run #{existing.pk} already done: {existing.message}")
            return
        admin = get_user_model().objects.filter(username="admin").first()
        run = run_services.start_run(name="demo", user=admin, enqueue=False, config={
            "limits": {"max_pairs": 10},
            "llm": {"provider": "replay", "cassette": str(DEMO_CASSETTE), "model": "scripted-demo"},
        })
        run = run_services.execute_run_inline(run.pk)
        progress = run_services.run_progress(run)
        self.stdout.write(
            f"Synthesis run #{run.pk} ({run.get_status_display()}): {progress['calls']} LLM calls replayed, "
            f"{progress['accepted_pairs']} accepted pairs, {progress['consistent_scenarios']} reconstructed scenarios."
        )
