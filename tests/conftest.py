import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SAMPLE_CORPUS = SHARED / "corpus" / "openclaw-sample"
DEMO_CORPUS = REPO / "skills" / "demo_corpus"


@pytest.fixture(autouse=True)
def _data_dir(request, tmp_path_factory):
    """Each Django test writes uploads and ingest areas under its own data directory.
    Django-free tests (tests/lib) also run with `-p no:django`, where there are no settings."""
    if not request.config.pluginmanager.hasplugin("django"):
        return None
    settings = request.getfixturevalue("settings")
    # beside tmp_path, not in it: tests may assert what their tmp_path contains
    settings.DATA_DIR = tmp_path_factory.mktemp("data")
    return settings.DATA_DIR


@pytest.fixture(autouse=True)
def _taxonomy(request):
    """Transactional tests flush every table, the seeded taxonomy included: seed it again."""
    if "transactional_db" in request.fixturenames or "live_server" in request.fixturenames:
        from skills.models import Category
        from skills.taxonomy import seed

        request.getfixturevalue("transactional_db")
        if not Category.objects.exists():
            seed(Category)


@pytest.fixture
def users(db):
    from facet_site.services import ensure_user

    return {
        role: ensure_user(username=f"{role}-user", password=f"{role}-password-1", role=role)
        for role in ("admin", "reviewer", "viewer")
    }


@pytest.fixture
def client_as(client, users):
    def login(role):
        client.force_login(users[role])
        return client

    return login


@pytest.fixture
def token_for(users):
    from facet_site.models import ApiToken

    def issue(role):
        _, secret = ApiToken.issue(user=users[role], name=f"{role} token")
        return secret

    return issue


def write_skill(root: Path, rel: str, text: str, meta: dict | None = None, files: dict | None = None) -> Path:
    """Writes one skill directory: SKILL.md, optional _meta.json and supporting files."""
    import json

    d = root / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / "SKILL.md").write_text(text)
    if meta is not None:
        (d / "_meta.json").write_text(json.dumps(meta))
    for path, content in (files or {}).items():
        f = d / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content if isinstance(content, bytes) else content.encode())
    return d


@pytest.fixture
def demo_corpus_copy(tmp_path):
    target = tmp_path / "demo_corpus"
    shutil.copytree(DEMO_CORPUS, target)
    return target


def replay_demo_synthesis():
    """Ingest the demo corpus and run the demo's synthesis inline from the bundled cassette, with the
    limits `facet demo` uses; the finished run."""
    from facet_site.management.commands.demo import DEMO_CASSETTE, DEMO_LIMITS
    from scenarios import services
    from skills import services as skill_services

    skill_services.ingest_path(DEMO_CORPUS, label="demo-corpus")
    run = services.start_run(name="demo", enqueue=False, trusted=True, config={
        "limits": DEMO_LIMITS, "llm": {"provider": "replay", "cassette": str(DEMO_CASSETTE), "model": "scripted-demo"}})
    return services.execute_run_inline(run.pk)


def database_url() -> str:
    """The test database as a URL, for processes the tests start (Celery workers)."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    at = "@" if user else ""
    return f"postgres://{user}{password}{at}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


@pytest.fixture
def celery_worker(transactional_db, tmp_path):
    """A real Celery worker process on the configured broker, serving the default and LLM queues."""
    from django.conf import settings

    from tests.workers import WorkerProcess, worker_env

    # the broker folder was fixed when settings loaded; the worker must use the same one
    worker = WorkerProcess(name=f"test-{os.getpid()}", queues="default,llm", log_path=tmp_path / "worker.log",
                           env=worker_env(settings.BROKER_DIR.parent))
    yield worker
    worker.stop()


def pytest_sessionfinish(session, exitstatus):
    """Remove this test process's data directory (broker folder, test database) under var/test."""
    data_dir = os.environ.get("FACET_DATA_DIR", "")
    if f"run-{os.getpid()}" in data_dir:
        shutil.rmtree(data_dir, ignore_errors=True)


def docker_engine_with_base_image():
    """A Docker client whose engine has facet's base image, built first when missing (on a fresh
    machine no earlier test or command has built it). Without an engine, or when the build fails,
    the test skips — or fails under FACET_REQUIRE_DOCKER=1, so CI cannot skip Docker tests."""
    from django.conf import settings

    from facet_site.lib import docker_engine as de

    required = os.environ.get("FACET_REQUIRE_DOCKER") == "1"
    try:
        client = de.connect(settings.DOCKER_HOST)
        de.ensure_base_image(client, data_dir=settings.DATA_DIR)
    except de.DockerEngineError as exc:
        (pytest.fail if required else pytest.skip)(f"{exc}")
    return client
