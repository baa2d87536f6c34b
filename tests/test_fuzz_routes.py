"""Issue 18, item 4: no route answers bad input with a 500. The routes come from the URL conf and the
operations from the OpenAPI document, so a new page or API operation is fuzzed without a change
here. As an admin, every route gets NUL bytes, integers past 64 bits, negative numbers and words
where numbers belong, in its query string (the page's own form fields and the API's declared
parameters), its form fields and its JSON body, and bodies that are not objects.

NUL bytes and 64-bit overflows fail only on PostgreSQL (SQLite takes both), so CI runs this with
DATABASE_URL pointing at PostgreSQL, and with CI set it refuses to pass on anything else."""
import json
import os
import re

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from facet_site.api import api as ninja_api
from skills import services as skill_services
from skills.models import Skill
from tests.conftest import write_skill
from tests.tasks.review_records import make_run, make_task

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

NUL = "a\x00b"
# past 64 bits, at the edge of 64 bits (past PostgreSQL's 32-bit integer columns), negative, a word
NUMBERS = [str(2**70), str(2**63 - 1), "-1", "x"]
# filter names a page may read without a form field for them
COMMON_PARAMS = ["q", "page", "status", "run", "category", "sort", "query", "verdict", "user", "action", "view"]
# routes that end the admin's session or belong to Django's own admin
SKIPPED = ("logout/", "admin/")
# fields a task's version or a skill's file route needs
PATH_VALUES = {"path": "instruction.md", "file_path": "SKILL.md", "name": "solution.log", "table": "pass-at-k"}


def walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def existing_id(param: str) -> int:
    """The smallest id of the model the parameter names (task_id -> Task, batch_id -> a batch), else 1."""
    stem = param.removesuffix("_id").replace("_", "")
    for model in apps.get_models():
        if model._meta.model_name.endswith(stem):
            row = model.objects.order_by("pk").values_list("pk", flat=True).first()
            if row is not None:
                return row
    return 1


def concrete(route: str) -> str:
    def fill(match):
        kind, name = match.group(1), match.group(2)
        if kind == "int" or name.endswith("_id") or name in ("pk", "number"):
            return str(existing_id(name))
        return PATH_VALUES.get(name, "x")

    return "/" + re.sub(r"[<{](?:(\w+):)?(\w+)[>}]", fill, route)


@pytest.fixture
def data(users, tmp_path):
    run = make_run()
    make_task(run)
    make_task(run, name="second")
    root = tmp_path / "corpus"
    # a file named with a newline must not break its skill's page
    write_skill(root, "csv", "---\nname: csv-report\ndescription: Summarise a CSV file into a report\n---\n"
                "# CSV report\n\n1. Read the CSV with `csvkit`.\n2. Write `report.md`.\n",
                files={"scripts/odd\nname.sh": "echo hi\n"})
    skill_services.ingest_path(root, label="fuzz")
    assert Skill.objects.exists()
    return run


@pytest.fixture
def admin_client(users):
    client = Client()
    client.force_login(users["admin"])
    return client


class Failures(list):
    def check(self, client, method, url, **kwargs):
        try:
            # a savepoint per request: on PostgreSQL a failed query spoils the test's transaction
            with transaction.atomic():
                response = getattr(client, method)(url, **kwargs)
        except Exception as exc:  # the test client re-raises what the view raised
            self.append(f"{method.upper()} {url} {kwargs.get('data')!r}: {type(exc).__name__}: {str(exc)[:200]}")
            return None
        if response.status_code >= 500:
            self.append(f"{method.upper()} {url} {kwargs.get('data')!r}: {response.status_code}")
        return response


def form_fields(html: str) -> list[str]:
    return sorted({n for n in re.findall(r'name="([^"]+)"', html) if n != "csrfmiddlewaretoken"})


def test_no_page_answers_bad_input_with_a_500(data, admin_client):
    if os.environ.get("CI") and connection.vendor != "postgresql":
        pytest.fail("CI runs the fuzz test on PostgreSQL (set DATABASE_URL)")
    failures = Failures()
    routes = [r for r in walk(get_resolver().url_patterns) if not r.startswith(SKIPPED) and not r.startswith("api/")]
    assert len(routes) > 50
    for route in routes:
        url = concrete(route)
        first = failures.check(admin_client, "get", url)
        html = first.content.decode(errors="replace") if first is not None and first.get("Content-Type", "").startswith("text/html") else ""
        names = sorted(set(form_fields(html)) | set(COMMON_PARAMS))
        # every field at once: one request per kind of bad value keeps the run short
        for value in (NUL, *NUMBERS):
            failures.check(admin_client, "get", url, data={n: value for n in names})
            failures.check(admin_client, "post", url, data={n: value for n in names})
    assert failures == [], "\n".join(failures)


def body_from_schema(schema: dict, components: dict, value_for) -> object:
    if "$ref" in schema:
        return body_from_schema(components[schema["$ref"].rsplit("/", 1)[-1]], components, value_for)
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            return body_from_schema(schema[key][0], components, value_for)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {k: body_from_schema(v, components, value_for) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [body_from_schema(schema.get("items") or {}, components, value_for)]
    return value_for(kind)


BODY_VALUES = [
    {"string": NUL, "integer": 2**70, "number": 1e308, "boolean": True},
    {"string": "x", "integer": 2**63 - 1, "number": -1, "boolean": False},
    {"string": "", "integer": -1, "number": 0, "boolean": True},
    {"string": "1", "integer": "x", "number": "x", "boolean": "x"},
]


def test_no_api_operation_answers_bad_input_with_a_500(data, admin_client):
    if os.environ.get("CI") and connection.vendor != "postgresql":
        pytest.fail("CI runs the fuzz test on PostgreSQL (set DATABASE_URL)")
    document = ninja_api.get_openapi_schema(path_prefix="/api/")
    components = document.get("components", {}).get("schemas", {})
    failures = Failures()
    operations = 0
    for path, item in document["paths"].items():
        url = concrete(path.lstrip("/"))
        for method, operation in item.items():
            operations += 1
            query = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]
            send = {"get": "get", "delete": "delete"}.get(method)
            if send:
                failures.check(admin_client, send, url, data={n: NUL for n in query} if method == "get" else None)
                for name in query if method == "get" else []:  # one at a time: the API checks each
                    for value in NUMBERS:
                        failures.check(admin_client, "get", url, data={name: value})
                continue
            content = (operation.get("requestBody") or {}).get("content", {})
            suffix = "?" + "&".join(f"{n}=x" for n in query) if query else ""
            if "application/json" in content:
                schema = content["application/json"]["schema"]
                for values in BODY_VALUES:
                    body = body_from_schema(schema, components, lambda kind, v=values: v.get(kind, "x"))
                    failures.check(admin_client, method, url + suffix, data=json.dumps(body), content_type="application/json")
                for raw in ("[]", '"x"', "1", "null", "{", json.dumps({"\x00": 1})):
                    failures.check(admin_client, method, url + suffix, data=raw, content_type="application/json")
            else:  # multipart (uploads) or no body: form fields without their files
                form = (content.get("multipart/form-data") or {}).get("schema") or {}
                fields = body_from_schema(form, components, lambda kind: NUL) if form else {}
                failures.check(admin_client, method, url + suffix, data=fields if isinstance(fields, dict) else {})
                for value in NUMBERS:
                    failures.check(admin_client, method, url, data={n: value for n in (fields or {})} | {n: value for n in query})
    assert operations > 40
    assert failures == [], "\n".join(failures)
