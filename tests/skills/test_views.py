"""The skill pages as a reviewer or viewer sees them."""
import io
import zipfile

import pytest
from django.urls import reverse

from skills import services
from skills.models import Category, IngestBatch, IngestBatchStatus, Skill
from tests.conftest import write_skill
from tests.html_safety import active_content

from .samples import CSV_SKILL, SQLITE_SKILL, UNSAFE_SKILL, XSS_SKILL

pytestmark = pytest.mark.django_db


@pytest.fixture
def ingested(tmp_path):
    root = tmp_path / "c"
    write_skill(root, "csv", CSV_SKILL, files={"scripts/clean.py": "print('x')\n" * 300})
    write_skill(root, "sqlite", SQLITE_SKILL)
    write_skill(root, "unsafe", UNSAFE_SKILL)
    write_skill(root, "xss", XSS_SKILL)
    services.ingest_path(root, label="c")
    return {s.name: s for s in Skill.objects.all()}


PAGES = ["home", "skills:list", "skills:taxonomy", "skills:upload", "tokens"]


@pytest.mark.parametrize("name", PAGES)
def test_every_page_needs_a_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_skill_pages_need_a_login(client, ingested):
    skill = ingested["csv-dedupe"]
    for url in [reverse("skills:detail", args=[skill.pk]), reverse("skills:file", args=[skill.pk, "scripts/clean.py"]), "/api/docs"]:
        assert client.get(url).status_code == 302, url


@pytest.mark.parametrize("role", ["admin", "reviewer", "viewer"])
@pytest.mark.parametrize("name", PAGES)
def test_every_role_can_read_every_page(client_as, ingested, role, name):
    assert client_as(role).get(reverse(name)).status_code == 200


def test_the_list_filters_and_counts(client_as, ingested):
    c = client_as("viewer")
    page = c.get(reverse("skills:list"), {"status": "rejected"}).content.decode()
    assert "disk-reclaimer" in page and "csv-dedupe" not in page
    assert "<b>1</b> skill" in page
    page = c.get(reverse("skills:list"), {"verdict": "unsafe"}).content.decode()
    assert "disk-reclaimer" in page
    page = c.get(reverse("skills:list"), {"q": "sqlite revenue"}).content.decode()
    assert "sqlite-report" in page and "csv-dedupe" not in page


def test_the_list_filters_by_top_level_category(client_as, ingested):
    skill = ingested["sqlite-report"]
    parent = skill.category.parent
    page = client_as("viewer").get(reverse("skills:list"), {"category": parent.slug}).content.decode()
    assert "sqlite-report" in page
    other = Category.objects.filter(parent=None).exclude(pk=parent.pk).exclude(children__skills__name="sqlite-report").first()
    page = client_as("viewer").get(reverse("skills:list"), {"category": other.slug}).content.decode()
    assert "sqlite-report" not in page


def test_htmx_requests_get_only_the_results_fragment(client_as, ingested):
    response = client_as("viewer").get(reverse("skills:list"), {"q": "csv"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert 'id="results"' in html and "<html" not in html and "csv-dedupe" in html


def test_skill_detail_shows_record_verdicts_and_neighbours(client_as, ingested):
    skill = ingested["disk-reclaimer"]
    html = client_as("viewer").get(reverse("skills:detail", args=[skill.pk])).content.decode()
    assert "Unsafe instructions" in html
    assert "Nearest skills" in html and "csv-dedupe" in html


def test_skill_text_never_runs_as_script(client_as, ingested):
    skill = ingested["html-report-writer"]
    html = client_as("viewer").get(reverse("skills:detail", args=[skill.pk])).content.decode()
    assert active_content(html) == []
    assert "&lt;script&gt;alert" in html  # shown as text, not dropped silently


def test_a_viewer_cannot_override_a_category(client_as, ingested):
    skill = ingested["csv-dedupe"]
    target = Category.objects.filter(parent__isnull=False).exclude(pk=skill.category_id).first()
    response = client_as("viewer").post(reverse("skills:override-category", args=[skill.pk]), {"category": target.pk})
    assert response.status_code == 403
    skill.refresh_from_db()
    assert skill.category_id != target.pk


def test_a_reviewer_overrides_a_category(client_as, ingested, users):
    skill = ingested["csv-dedupe"]
    target = Category.objects.filter(parent__isnull=False).exclude(pk=skill.category_id).first()
    c = client_as("reviewer")
    response = c.post(reverse("skills:override-category", args=[skill.pk]), {"category": target.pk}, follow=True)
    assert f"Category set to “{target.name}”" in response.content.decode()
    skill.refresh_from_db()
    assert skill.category == target and skill.category_source == "override"
    assert skill.category_overridden_by == users["reviewer"]


def test_override_needs_csrf(users, ingested):
    from django.test import Client

    c = Client(enforce_csrf_checks=True)
    c.force_login(users["reviewer"])
    skill = ingested["csv-dedupe"]
    assert c.post(reverse("skills:override-category", args=[skill.pk]), {"category": 1}).status_code == 403


def test_long_files_are_collapsed_with_show_all_and_download(client_as, ingested):
    skill = ingested["csv-dedupe"]
    c = client_as("viewer")
    url = reverse("skills:file", args=[skill.pk, "scripts/clean.py"])
    html = c.get(url).content.decode()
    assert "Show all 301 lines" in html
    assert 'id="L-12"' in html and 'href="#L-12"' in html  # every line can be linked to
    assert 'id="L-201"' not in html
    assert "Show all" not in c.get(url, {"all": "1"}).content.decode()
    download = c.get(url, {"download": "1"})
    assert download["Content-Disposition"].startswith("attachment")


def test_taxonomy_page_shows_live_counts_and_charts(client_as, ingested):
    html = client_as("viewer").get(reverse("skills:taxonomy")).content.decode()
    assert "Agent orchestration and automation" in html
    assert 'id="sunburst-data"' in html and "sunburst" in html
    assert "vendor/plotly/plotly.min.js" in html
    accepted = Skill.objects.current().accepted().count()
    assert f"over the {accepted} accepted skills" in html


def test_plotly_is_served_from_our_static_files(client_as):
    response = client_as("viewer").get("/static/vendor/plotly/plotly.min.js")
    assert response.status_code == 200


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("one/SKILL.md", CSV_SKILL)
    return buf.getvalue()


def test_a_viewer_cannot_upload(client_as):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = client_as("viewer").post(reverse("skills:upload"), {"archive": SimpleUploadedFile("s.zip", _zip_bytes())})
    assert response.status_code == 403
    assert not IngestBatch.objects.exists()


def test_uploading_a_non_archive_is_refused_with_a_clear_error(client_as):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = client_as("reviewer").post(reverse("skills:upload"), {"archive": SimpleUploadedFile("notes.txt", b"hi")}, follow=True)
    assert "notes.txt: upload a .zip, .tar.gz or .tar archive" in response.content.decode()


def test_an_upload_is_queued_and_its_page_polls_until_done(client_as, settings, django_capture_on_commit_callbacks):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.CELERY_TASK_ALWAYS_EAGER = True
    from facet_site.celery import app

    app.conf.task_always_eager = True
    try:
        c = client_as("reviewer")
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = c.post(reverse("skills:upload"), {"archive": SimpleUploadedFile("s.zip", _zip_bytes())})
        batch = IngestBatch.objects.get()
        assert response["Location"] == reverse("skills:batch", args=[batch.pk])
        queued = c.get(reverse("skills:batch", args=[batch.pk]), HTTP_HX_REQUEST="true")
        assert queued.status_code == 200 and "waiting for a worker" in queued.content.decode()
        assert 'hx-trigger="every 2s"' in queued.content.decode()
        for callback in callbacks:
            callback()
        done = c.get(reverse("skills:batch", args=[batch.pk]), HTTP_HX_REQUEST="true")
        assert done.status_code == 286
        assert "every 2s" not in done.content.decode()
        batch.refresh_from_db()
        assert batch.status == IngestBatchStatus.SUCCEEDED and batch.summary["ingested"] == 1
    finally:
        app.conf.task_always_eager = False


def test_tokens_are_created_shown_once_and_revoked(client_as, users):
    from facet_site.models import ApiToken

    c = client_as("viewer")
    html = c.post(reverse("tokens"), {"name": "script"}).content.decode()
    token = ApiToken.objects.get(user=users["viewer"])
    assert token.prefix in html and "it is not shown again" in html
    assert token.token_hash not in html
    c.post(reverse("revoke-token", args=[token.pk]))
    token.refresh_from_db()
    assert not token.is_active


def test_a_user_cannot_revoke_someone_elses_token(client_as, users):
    from facet_site.models import ApiToken

    token, _ = ApiToken.issue(user=users["reviewer"], name="theirs")
    assert client_as("viewer").post(reverse("revoke-token", args=[token.pk])).status_code == 404
    token.refresh_from_db()
    assert token.is_active


def test_the_admin_lists_every_model(client_as):
    c = client_as("admin")
    for model in ["skill", "skillfile", "verdict", "category", "ingestbatch", "ingestproblem"]:
        assert c.get(f"/admin/skills/{model}/").status_code == 200, model
    assert c.get("/admin/facet_site/apitoken/").status_code == 200
    assert client_as("reviewer").get("/admin/").status_code == 302
