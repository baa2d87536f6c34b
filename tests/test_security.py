"""Issue 18, production defaults and the bad-input backstop: Content-Security-Policy, Swagger UI
from our own static files, remote images shown as links, login throttling, password validators,
the HTTPS settings (`check --deploy` clean), demo users keeping changed passwords, pair imports
that create no accepted skill, and 4xx (never 500) for NUL bytes and 64-bit overflows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client

from facet_site.lib.render import render_markdown
from scenarios import pairs_jsonl
from scenarios.models import SynthesisRun
from skills.models import Skill, SkillStatus

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def api(client, token_for):
    header = {"HTTP_AUTHORIZATION": f"Bearer {token_for('admin')}"}

    class Api:
        def get(self, url, **params):
            return client.get(url, params, **header)

        def post(self, url, payload, raw=False):
            body = payload if raw else json.dumps(payload)
            return client.post(url, body, content_type="application/json", **header)

    return Api()


# --- Content-Security-Policy and third parties --------------------------------------------------


def test_every_page_carries_a_policy_allowing_only_our_own_scripts_and_images(client_as):
    response = client_as("reviewer").get("/skills/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "img-src 'self' data:;" in policy and "default-src 'self'" in policy
    assert "unsafe-inline" not in policy.split("script-src", 1)[1].split(";", 1)[0]
    assert Client().get("/login/")["Content-Security-Policy"] == policy


def test_no_template_has_an_inline_script_or_event_handler():
    import re

    offenders = []
    for path in [*REPO.glob("templates/**/*.html"), *REPO.glob("*/templates/**/*.html")]:
        text = path.read_text()
        for match in re.finditer(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>|\son[a-z]+=\"", text):
            offenders.append(f"{path.relative_to(REPO)}: {match.group(0)}")
    assert offenders == []


def test_a_remote_image_in_skill_markdown_is_a_link_not_an_image():
    html = render_markdown("See ![the chart](https://tracker.example/pixel.png) here.")
    assert "<img" not in html
    assert 'href="https://tracker.example/pixel.png"' in html and "[image: the chart]" in html


def test_the_api_docs_load_swagger_ui_from_our_static_files(client_as):
    page = client_as("viewer").get("/api/docs").content.decode()
    assert "cdn" not in page.lower() and "https://" not in page and "http://" not in page
    scripts = [part.split('"', 1)[0] for part in page.split('src="')[1:]]
    assert scripts and all(src.startswith("/static/") for src in scripts), scripts
    for src in scripts:
        assert Client().get(src).status_code == 200, src


# --- logins and passwords -------------------------------------------------------------------------


@pytest.fixture
def local_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "throttle"}}
    settings.FACET_LOGIN_MAX_FAILURES, settings.FACET_LOGIN_MAX_FAILURES_PER_IP = 3, 5
    from django.core.cache import cache

    cache.clear()  # a local-memory cache of this name outlives the test that filled it


def test_logins_are_throttled_per_user_then_per_address(users, local_cache):
    client = Client()
    for _ in range(3):
        assert client.post("/login/", {"username": "reviewer-user", "password": "wrong"}).status_code == 200
    refused = client.post("/login/", {"username": "reviewer-user", "password": "reviewer-password-1"})
    assert refused.status_code == 429 and "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # another user from the same address still logs in, until the address has failed too often
    assert client.post("/login/", {"username": "viewer-user", "password": "viewer-password-1"}).status_code == 302
    other = Client()
    for _ in range(2):
        other.post("/login/", {"username": "nobody", "password": "wrong"})
    assert other.post("/login/", {"username": "admin-user", "password": "admin-password-1"}).status_code == 429


def test_a_successful_login_clears_the_users_failures(users, local_cache):
    client = Client()
    for _ in range(2):
        client.post("/login/", {"username": "viewer-user", "password": "wrong"})
    assert client.post("/login/", {"username": "viewer-user", "password": "viewer-password-1"}).status_code == 302
    client.logout()
    for _ in range(2):
        client.post("/login/", {"username": "viewer-user", "password": "wrong"})
    assert client.post("/login/", {"username": "viewer-user", "password": "viewer-password-1"}).status_code == 302


@pytest.mark.parametrize("password", ["short1", "password1234", "12345678901234", "reviewer-user-1"])
def test_weak_passwords_are_refused(password, db):
    user = get_user_model()(username="reviewer-user")
    with pytest.raises(ValidationError):
        validate_password(password, user)


def test_the_documented_production_settings_pass_check_deploy(tmp_path):
    env = dict(os.environ, DEBUG="0", FACET_HTTPS="1", FACET_PROXY_SSL_HEADER="1", FACET_DATA_DIR=str(tmp_path),
               FACET_HSTS_PRELOAD="1", SECRET_KEY="x" * 20 + "a-long-random-production-secret-key-0123456789",
               ALLOWED_HOSTS="facet.example.org", DJANGO_SETTINGS_MODULE="facet_site.settings")
    env.pop("DATABASE_URL", None)
    # set by the browser tests' fixtures in this process (Playwright's sync API); never in production
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "System check identified no issues" in out.stdout


def test_the_demo_never_resets_a_password_someone_changed(db):
    from facet_site.management.commands.demo import DEMO_USERS, ensure_demo_users

    ensure_demo_users()
    reviewer = get_user_model().objects.get(username="reviewer")
    assert reviewer.check_password(dict((u, p) for u, p, _ in DEMO_USERS)["reviewer"])
    reviewer.set_password("a-new-and-long-passphrase")
    reviewer.save()
    ensure_demo_users()
    reviewer.refresh_from_db()
    assert reviewer.check_password("a-new-and-long-passphrase")


# --- imports and exports ------------------------------------------------------------------------------


def test_a_pair_import_creates_no_accepted_skill_and_refuses_nul_bytes(db):
    run = SynthesisRun.objects.create(name="imports")
    result = pairs_jsonl.import_pairs_jsonl(run=run, stream=[
        json.dumps({"pair_id": "p1", "skill_ids": ["new-a", "new-b"], "skill_summaries": ["rm -rf /", "b"]}),
        json.dumps({"pair_id": "p2", "skill_ids": ["c\x00", "d"]}),
    ])
    assert result.created == 1 and result.errors == [(2, "line 2: skill_ids.0: text must not contain NUL bytes")]
    imported = Skill.objects.filter(source="imported-pairs")
    assert imported.count() == 2 and set(imported.values_list("status", flat=True)) == {SkillStatus.REJECTED}
    assert not Skill.objects.filter(status=SkillStatus.ACCEPTED).exists()


@pytest.mark.parametrize("body", ["[]", '"status=approved"', "1", "null"])
def test_an_export_body_that_is_not_an_object_is_a_422(api, users, body):
    response = api.post("/api/exports", body, raw=True)
    assert response.status_code == 422, response.content


# --- the bad-input backstop ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/skills/?q=a%00b", "/tasks/?q=%00", "/repository/?q=%00", "/tasks/audit/?user=%00",
                                 "/tasks/queue/?q=%00"])
def test_a_nul_byte_in_a_page_filter_is_a_400_with_a_message(client_as, url):
    response = client_as("admin").get(url)
    assert response.status_code == 400 and "NUL" in response.content.decode()


@pytest.mark.parametrize("url", ["/api/skills?q=%00", "/api/pairs?q=a%00", "/api/audit?action=%00",
                                 "/api/scenarios?consistency=%00"])
def test_a_nul_byte_in_an_api_filter_is_a_400_naming_it(api, url):
    response = api.get(url)
    assert response.status_code == 400 and "NUL" in response.json()["detail"]


@pytest.mark.parametrize("url", ["/api/skills", "/api/pairs", "/api/runs", "/api/tasks", "/api/exports"])
def test_a_page_number_past_64_bits_is_a_4xx_naming_it(api, url):
    response = api.get(url, page=str(2**70))
    assert response.status_code == 400 and response.json()["detail"] == "page: number out of range"
    response = api.get(url, page=str(2**62))  # fits 64 bits, but no list has that many pages
    assert response.status_code == 422 and "page" in response.content.decode()


def test_nul_bytes_and_huge_numbers_in_json_bodies_are_400s_naming_the_field(api, users):
    response = api.post("/api/exports", {"query": "", "name": "a\x00b"})
    assert response.status_code == 400 and response.json()["detail"] == "name: text must not contain NUL bytes"
    response = api.post("/api/runs", {"name": "x", "config": {"limits": {"max_pairs": 2**70}}})
    assert response.status_code == 400 and response.json()["detail"] == "config.limits.max_pairs: number out of range"
