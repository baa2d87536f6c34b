"""Package names one slip away from a popular one (typosquats), Django-free.

Why: the commonest supply-chain attack on npm and PyPI is a package named like a popular one with
a letter dropped, doubled, swapped or changed (`node-fecth` for `node-fetch`, `reqeusts` for
`requests`): an agent that installs what a skill names installs the attacker's package. A skill
has no reason to name such a package, so the safety scan's `supply.typosquat` rule holds it.

The data (`popular_packages.json`, built by `scripts/build-popular-packages` from registry
download counts; its header says when and from what) holds, per registry, the most downloaded
names (the targets) and the popular names that are themselves one edit from a target (`bootstrap3` and
`bootstrap`, `pyaml` and `pyyaml`: both real and both widely used), which are never flagged.
A scoped npm name is judged by its scope (`@modelcontextprotoco1/server-filesystem`): `npm_scopes.json`
lists widely used scopes by hand, since download counts are kept per package, not per scope.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["DATA_PATH", "SCOPES_PATH", "ECOSYSTEMS", "MIN_LENGTH", "Popular", "normalise", "near_miss", "one_edit",
           "load_popular", "load_scopes", "build_popular", "names_in", "first_near_miss"]

DATA_PATH = Path(__file__).with_name("popular_packages.json")
SCOPES_PATH = Path(__file__).with_name("npm_scopes.json")
ECOSYSTEMS = ("npm", "pypi")
MIN_LENGTH = 5  # shorter names have too many real neighbours (`ms`, `qs`, `ws`, `vue`) to mean anything


def normalise(ecosystem: str, name: str) -> str:
    """The registry's own comparison form: PyPI folds case and runs of `-`, `_`, `.` (PEP 503);
    npm names are lower case already (an upper-case letter is folded here, not refused)."""
    name = name.strip().lower()
    return re.sub(r"[-_.]+", "-", name) if ecosystem == "pypi" else name


def one_edit(a: str, b: str) -> bool:
    """`a` and `b` differ by exactly one insertion, deletion, substitution or swap of two
    neighbouring characters (optimal string alignment distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        if a[i + 1:] == b[i + 1:]:
            return True  # one substitution
        return i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]
    return a[i:] == b[i + 1:]  # one insertion into the shorter


def _deletions(name: str) -> set[str]:
    return {name} | {name[:i] + name[i + 1:] for i in range(len(name))}


@dataclass(frozen=True)
class Popular:
    targets: frozenset[str]
    also_popular: frozenset[str]  # popular names one edit from a target: real packages, never a squat
    index: dict  # deletion variant -> targets, for looking up neighbours without comparing to all

    @classmethod
    def of(cls, targets: Iterable[str], also_popular: Iterable[str]) -> Popular:
        index: dict[str, list[str]] = {}
        for t in targets:
            for d in _deletions(t):
                index.setdefault(d, []).append(t)
        return cls(frozenset(targets), frozenset(also_popular), index)

    def target_near(self, name: str) -> str | None:
        """The popular name `name` (normalised) is one edit from, when it is not popular itself."""
        if len(name) < MIN_LENGTH or name in self.targets or name in self.also_popular:
            return None
        hits = {t for d in _deletions(name) for t in self.index.get(d, ()) if len(t) >= MIN_LENGTH and one_edit(name, t)}
        return min(hits) if hits else None


@lru_cache(maxsize=1)
def load_popular() -> dict[str, Popular]:
    data = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    return {eco: Popular.of(data[eco]["targets"], data[eco]["also_popular"]) for eco in ECOSYSTEMS}


@lru_cache(maxsize=1)
def load_scopes() -> Popular:
    return Popular.of(json.loads(SCOPES_PATH.read_text(encoding="utf-8"))["scopes"], ())


def near_miss(ecosystem: str, name: str) -> str | None:
    """The popular package of `ecosystem` ("npm" or "pypi") that `name` is one slip away from, or
    None: a short name, a popular name and an unrelated one are None. A scoped npm name (`@org/x`) is
    judged by its scope: `@modelcontextprotoco1/server-github` -> `@modelcontextprotocol/server-github`."""
    if ecosystem not in ECOSYSTEMS:
        return None
    if name.startswith("@"):
        scope, _, rest = name[1:].lower().partition("/")
        target = load_scopes().target_near(scope) if ecosystem == "npm" and rest else None
        return f"@{target}/{rest}" if target else None
    return load_popular()[ecosystem].target_near(normalise(ecosystem, name))


# Options of an install command whose next word is a file, an index or a folder, not a package.
_TAKES_VALUE = frozenset({"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                          "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--python",
                          "--registry", "-w", "--workspace", "--cache", "--userconfig"})
_FILE_SUFFIXES = (".txt", ".whl", ".tar.gz", ".tgz", ".zip", ".toml", ".cfg", ".json", ".lock", ".in")


def names_in(ecosystem: str, text: str) -> list[str]:
    """The package names in what an install command or a manifest lists: the words of
    `pip install -U reqeusts==2.31 "numpy>=1"`, or the keys of a package.json dependencies block,
    or the quoted requirements of a pyproject array; options, paths, URLs and versions left out."""
    if ecosystem == "npm" and re.search(r"""["'][^"'\n]{1,214}["']\s*:""", text):  # package.json: "name": "^1.2.3"
        words = re.findall(r"""["']([^"'\n]{1,214})["']\s*:""", text)
    else:  # a quoted requirement is one word ("numpy >= 1", a pyproject array's items), else words split at spaces
        words = [q or b for q, b in re.findall(r"""["']([^"'\n]{1,400})["']|([^\s"']+)""", text)]
    out, skip = [], False
    for word in words:
        word = word.strip("\"'`,;()")
        if skip or not word:
            skip = False
            continue
        if word.startswith("-"):
            skip = word in _TAKES_VALUE
            continue
        if ecosystem == "npm":
            if word.startswith("@"):
                # scoped, a version after the second @: `@org/pkg@1.2`
                scoped = "@" + word[1:].split("@", 1)[0]
                if re.fullmatch(r"@[a-z0-9][\w.-]{0,100}/[a-z0-9][\w.-]{0,213}", scoped, re.I):
                    out.append(scoped)
                continue
            word = word.split("@", 1)[0]
        else:
            word = re.split(r"[\s<>=!~;\[@(]", word, maxsplit=1)[0]
        if not word or "/" in word or ":" in word or word.startswith(".") or word.lower().endswith(_FILE_SUFFIXES):
            continue
        if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,213}", word):
            out.append(word)
    return out


def first_near_miss(ecosystem: str, text: str) -> tuple[str, str] | None:
    """(name, the popular name it is one slip from) for the first such name in `text`, else None."""
    for name in names_in(ecosystem, text):
        if (target := near_miss(ecosystem, name)) is not None:
            return name, target
    return None


def build_popular(ranked: dict[str, list[str]], popular: dict[str, Iterable[str]], targets: int) -> dict:
    """The data file's registries: per ecosystem, the first `targets` names of `ranked` (most
    downloaded first) and, of the `popular` names, those one edit from one of them."""
    out = {}
    for eco in ECOSYSTEMS:
        top = [n for n in dict.fromkeys(normalise(eco, n) for n in ranked[eco]) if not n.startswith("@")][:targets]
        table = Popular.of(top, ())
        near = sorted({n for n in (normalise(eco, p) for p in popular[eco])
                       if n not in table.targets and table.target_near(n) is not None})
        out[eco] = {"targets": top, "also_popular": near}
    return out
