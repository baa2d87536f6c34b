import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SAMPLE_CORPUS = SHARED / "corpus" / "openclaw-sample"
DEMO_CORPUS = REPO / "skills" / "demo_corpus"


@pytest.fixture(autouse=True)
def _data_dir(request, tmp_path):
    """Each Django test writes uploads and ingest areas under its own data directory.
    Django-free tests (tests/lib) also run with `-p no:django`, where there are no settings."""
    if not request.config.pluginmanager.hasplugin("django"):
        return None
    settings = request.getfixturevalue("settings")
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
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
