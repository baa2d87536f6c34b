"""Publisher taint, Django-free: a publisher with an unsafe skill makes their other skills
suspicious (rule `publisher.unsafe-sibling`), so a registry account caught shipping a dropper is
not trusted for its other uploads. `publishers_to_taint()` names the owners; `apply_publisher_taint()`
raises the others' reports; `taint_finding()` is the finding they carry (skills.storing stores it
on skills already stored).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from facet_site.lib.skill_safety import SUSPICIOUS, UNSAFE, Finding, SafetyReport, load_rules, worst_level

__all__ = ["PUBLISHER_RULE_ID", "publishers_to_taint", "apply_publisher_taint", "taint_finding", "is_test_fixture"]

PUBLISHER_RULE_ID = "publisher.unsafe-sibling"
_EXCERPT_CHARS = 160  # as a finding's excerpt in skill_safety

def _owner_of_key(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def publishers_to_taint(
    reports_by_skill: Mapping[str, SafetyReport], *, owner_of: Callable[[str], str] = _owner_of_key
) -> set[str]:
    """Owners with at least one unsafe skill (skill keys are "owner/slug" unless owner_of says else)."""
    return {
        owner for key, report in reports_by_skill.items()
        if report.level == UNSAFE and (owner := owner_of(key))
    }


def apply_publisher_taint(
    reports_by_skill: Mapping[str, SafetyReport], *, owner_of: Callable[[str], str] = _owner_of_key,
    tainted: set[str] | None = None,
) -> dict[str, SafetyReport]:
    """The reports with every clean skill of a tainted publisher raised to suspicious.

    `tainted` may come from outside (owners already known unsafe from earlier ingests); by default
    it is computed from these reports. Unsafe and suspicious reports keep their level and gain
    the finding too, so a reviewer sees why the publisher is distrusted.
    """
    tainted = publishers_to_taint(reports_by_skill, owner_of=owner_of) if tainted is None else tainted
    out = {}
    for key, report in reports_by_skill.items():
        owner = owner_of(key)
        if owner not in tainted or report.level == UNSAFE:
            out[key] = report
            continue
        unsafe_siblings = sorted(k for k, r in reports_by_skill.items() if owner_of(k) == owner and r.level == UNSAFE)
        note = taint_finding(owner, unsafe_siblings)
        out[key] = replace(report, level=worst_level((report.level, SUSPICIOUS)), findings=(*report.findings, note))
    return out


def is_test_fixture(key: str, parent_key: str | None) -> bool:
    """A skill nested in a test folder of another skill (`scanner/test-fixtures/dropper`, the rule file's
    `test_dirs`) is that skill's test data, such as a security tool's malicious sample. It is scanned
    and rejected like any skill, but it says nothing of its publisher. `key` is the skill's path in
    its source (provenance "path"; a key such as "src:owner/slug/..." is read the same way) and
    `parent_key` the enclosing skill's (provenance "parent_key")."""
    path = key.split(":", 1)[1] if ":" in key.split("/", 1)[0] else key  # "clawhub:owner/slug/..." -> "owner/slug/..."
    parent = parent_key.split(":", 1)[1] if parent_key and ":" in parent_key.split("/", 1)[0] else parent_key
    if not parent or not path.startswith(parent + "/"):
        return False
    test_dirs = load_rules().test_dirs
    return any(part.lower() in test_dirs for part in path[len(parent) + 1:].split("/")[:-1])


def taint_finding(owner: str, unsafe_siblings: list[str]) -> Finding:
    """The finding a tainted publisher's other skills carry, naming the unsafe ones."""
    return Finding(
        rule_id=PUBLISHER_RULE_ID, level=SUSPICIOUS, path="", line=0,
        excerpt=f"publisher {owner} has unsafe skills: {', '.join(unsafe_siblings) or 'from an earlier ingest'}"[:_EXCERPT_CHARS],
        description="A publisher with an unsafe skill makes their other skills suspicious.",
    )
