"""The structure a newcomer relies on (docs/architecture.md), asserted by reading every module's
imports, so the dependency rules and the size rule stay true as the code grows."""
import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
APPS = ("facet_site", "skills", "scenarios", "tasks")

# Which top-level packages each layer must never import (docs/architecture.md, "Dependency rules").
FORBIDDEN = {
    "facet_site/lib": {"django", "facet_site", "skills", "scenarios", "tasks", "celery", "ninja"},
    "skills": {"scenarios", "tasks"},
    "scenarios": {"tasks"},
}
# A module past this many lines says at its top why it is not split (the house style: ~600).
MAX_LINES = 600
SIZE_REASON = "not split"


def production_modules():
    for app in APPS:
        for path in sorted((REPO / app).rglob("*.py")):
            rel = path.relative_to(REPO)
            if "migrations" in rel.parts:
                continue
            yield rel


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name the file imports, at any level (function-local imports count)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def layer_of(rel: Path) -> str | None:
    text = rel.as_posix()
    for layer in FORBIDDEN:
        if text == f"{layer}.py" or text.startswith(f"{layer}/"):
            return layer
    return None


def violations(rel: Path) -> list[str]:
    layer = layer_of(rel)
    if layer is None:
        return []
    banned = FORBIDDEN[layer]
    found = []
    for name in sorted(imported_modules(REPO / rel)):
        top = name.split(".")[0]
        if layer == "facet_site/lib" and name.startswith("facet_site.lib"):
            continue
        if top in banned:
            found.append(f"{rel} imports {name}")
    return found


def test_the_dependency_rules_hold_for_every_module():
    found = [v for rel in production_modules() for v in violations(rel)]
    assert found == [], "dependency rules broken (docs/architecture.md):\n" + "\n".join(found)


def test_the_rule_reader_sees_function_level_imports(tmp_path, monkeypatch):
    # The check must not miss the lazy `from tasks import jobs` inside a function that it exists to catch.
    module = tmp_path / "scenarios" / "late.py"
    module.parent.mkdir()
    module.write_text("def hand_on():\n    from tasks import jobs\n    import tasks.models\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert violations(Path("scenarios/late.py")) == [
        "scenarios/late.py imports tasks", "scenarios/late.py imports tasks.models"]


def test_lib_importing_django_is_a_violation(tmp_path, monkeypatch):
    module = tmp_path / "facet_site" / "lib" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text("from django.conf import settings\nfrom facet_site.lib import stats\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert violations(Path("facet_site/lib/x.py")) == ["facet_site/lib/x.py imports django.conf"]


def opening_text(text: str) -> str:
    """The module's docstring, or the comment lines it opens with."""
    docstring = ast.get_docstring(ast.parse(text))
    if docstring:
        return docstring
    comments = []
    for line in text.splitlines():
        if line.startswith("#!") or line.startswith("# -*-"):
            continue
        if not line.startswith("#"):
            break
        comments.append(line.lstrip("# "))
    return "\n".join(comments)


@pytest.mark.parametrize("rel", list(production_modules()), ids=lambda p: p.as_posix())
def test_every_module_says_what_it_holds_and_stays_small(rel):
    path = REPO / rel
    text = path.read_text()
    if not text.strip():
        return  # an empty package marker
    opening = opening_text(text)
    assert opening, f"{rel} does not open with a docstring or comment saying what it holds"
    lines = text.count("\n")
    if lines > MAX_LINES:
        assert SIZE_REASON in opening.lower(), (
            f"{rel} has {lines} lines: split it by concern, or say at its top why it is not split")
