"""Typosquats: package names one slip from a popular one (facet_site/lib/package_names.py), found
in install commands and dependency manifests by the safety scan's supply.typosquat rules. The names
below are shapes of real typosquat campaigns (a letter dropped, doubled, swapped or changed), written
for the tests; the popular names come from the shipped data file.
"""
from __future__ import annotations

import json

import pytest

from facet_site.lib import package_names
from facet_site.lib.package_names import build_popular, first_near_miss, names_in, near_miss, one_edit
from facet_site.lib.skill_safety import SUSPICIOUS, scan_parsed_skill, scan_text_part
from facet_site.lib.skillformat import discover
from tests.conftest import write_skill


@pytest.mark.parametrize("a,b,expected", [
    ("requests", "reqeusts", True),  # two neighbours swapped
    ("requests", "request", True),  # one dropped
    ("lodash", "lodashh", True),  # one doubled
    ("colorama", "colourama", True),  # one added
    ("django", "djanga", True),  # one changed
    ("requests", "requests", False),
    ("requests", "rqeuests2", False),  # two edits
    ("abc", "cba", False),
])
def test_one_edit(a, b, expected):
    assert one_edit(a, b) is expected and one_edit(b, a) is expected


@pytest.mark.parametrize("eco,name,target", [
    ("npm", "node-fecth", "node-fetch"), ("npm", "lodahs", "lodash"), ("npm", "electorn", "electron"),
    ("npm", "mongose", "mongoose"), ("pypi", "reqeusts", "requests"), ("pypi", "djanga", "django"),
    ("pypi", "colourama", "colorama"), ("pypi", "Python_Dateutill", "python-dateutil"),
])
def test_a_slip_from_a_popular_package_is_named(eco, name, target):
    assert near_miss(eco, name) == target


@pytest.mark.parametrize("eco,name", [
    ("npm", "node-fetch"), ("npm", "@types/nodee"), ("npm", "ws"), ("npm", "bootstrap3"),
    ("pypi", "requests"), ("pypi", "pyaml"),  # popular itself, though one letter from PyYAML
    ("pypi", "my-internal-tool"), ("pypi", "Requests"),  # PyPI names fold case
])
def test_popular_scoped_short_and_unrelated_names_are_not(eco, name):
    assert near_miss(eco, name) is None


def test_a_scope_one_slip_from_a_popular_scope_is_named_with_the_package_it_imitates():
    assert near_miss("npm", "@modelcontextprotoco1/server-filesystem") == "@modelcontextprotocol/server-filesystem"
    assert near_miss("npm", "@anthropc-ai/sdk") == "@anthropic-ai/sdk"
    # popular scopes one letter apart are both real; an unrelated scope and a bare scope say nothing
    assert [near_miss("npm", n) for n in ("@aws-cdk/core", "@aws-sdk/client-s3", "@acme-corp/tools", "@modelcontextprotoco1")] == [None] * 4
    assert first_near_miss("npm", '"-y", "@modelcontextprotoco1/server-github"') == (
        "@modelcontextprotoco1/server-github", "@modelcontextprotocol/server-github")


def test_names_in_commands_and_manifests():
    assert names_in("pypi", ' -U reqeusts==2.31 "numpy>=1" -r req.txt ./vendor/x git+https://h.example/y uvicorn[standard]') == [
        "reqeusts", "numpy", "uvicorn"]
    assert names_in("npm", " -g --save-dev @scope/x@2 foo@1.2 bar") == ["@scope/x", "foo", "bar"]
    assert names_in("npm", '\n    "express": "^4.19.2",\n    "node-fecth": "^2.6.7"\n  ') == ["express", "node-fecth"]
    assert names_in("pypi", '\n  "beautifulsoup4>=4.12",\n  "colourama>=0.4",\n') == ["beautifulsoup4", "colourama"]
    # one tokenizer for commands and manifests: quoted requirements are whole words
    assert names_in("pypi", '"uvicorn[standard]>=0.30", "requests", "colourama"') == ["uvicorn", "requests", "colourama"]
    assert first_near_miss("npm", " express node-fecth") == ("node-fecth", "node-fetch")


def test_the_data_is_built_from_download_ranks_and_keeps_popular_neighbours():
    ranked = {"npm": ["chalk", "express", "@types/node", "lodash"], "pypi": ["requests", "PyYAML", "numpy"]}
    popular = {"npm": ["chalk", "chalks", "express", "lodash", "unrelated"], "pypi": ["requests", "PyYAML", "pyaml", "numpy"]}
    data = build_popular(ranked, popular, targets=3)
    assert data["npm"] == {"targets": ["chalk", "express", "lodash"], "also_popular": ["chalks"]}
    assert data["pypi"] == {"targets": ["requests", "pyyaml", "numpy"], "also_popular": ["pyaml"]}
    shipped = json.loads(package_names.DATA_PATH.read_text())
    assert len(shipped["npm"]["targets"]) >= 1000 and "built" in shipped["about"].lower()


def test_a_skill_whose_manifest_or_setup_names_a_typosquat_is_held_and_says_which_package(tmp_path):
    skill_md = ("---\nname: http-mock\ndescription: Mock HTTP server for tests.\n---\n# HTTP mock\n\n"
                "```bash\nnpm install\nnpx -y prettierr --write src/\n```\n")
    package_json = '{\n  "name": "http-mock",\n  "dependencies": {\n    "express": "^4.19.2",\n    "node-fecth": "^2.6.7"\n  }\n}\n'
    write_skill(tmp_path / "c", "zephyr/http-mock", skill_md, {"owner": "zephyr", "slug": "http-mock"},
                {"package.json": package_json, "requirements.txt": "requests==2.31.0\ndjanga>=4\n"})
    [skill] = list(discover(tmp_path / "c", scan_text=scan_text_part))
    report = scan_parsed_skill(skill)
    assert report.level == SUSPICIOUS
    found = {(f.rule_id, f.path, f.line): f.excerpt for f in report.findings}
    assert found[("supply.typosquat-manifest", "package.json", 3)].startswith(
        "node-fecth is one letter from node-fetch, a popular npm package")
    assert "djanga is one letter from django" in found[("supply.typosquat-manifest", "requirements.txt", 2)]
    assert "prettierr is one letter from prettier" in found[("supply.typosquat", "SKILL.md", 9)]

