"""Demo task 3. git-history-audit + changelog-from-git: the first build fails, environment repair fixes it."""
from __future__ import annotations

from .common import DemoTask, _function


MAKE_REPO_BODY = r'''
repo=/app/repo
mkdir -p "$repo" /app/out
cd "$repo"
git init -q -b main .
day=0
commit() {  # commit SUBJECT [EMAIL]: one commit a day from 2026-01-05, so the history is reproducible
  local subject="$1" email="${2:-maria@quarrylabs.dev}"
  day=$((day + 1))
  local when="2026-01-$(printf %02d $((4 + day)))T10:00:00+00:00"
  if [ "$day" -gt 27 ]; then when="2026-02-$(printf %02d $((day - 27)))T10:00:00+00:00"; fi
  GIT_AUTHOR_EMAIL="$email" GIT_AUTHOR_DATE="$when" GIT_COMMITTER_DATE="$when" \
    git commit -q --allow-empty -m "$subject"
}
printf '# Export service\n' > README.md; git add README.md; commit "feat: initial import"
printf '# Changelog\n\n## v1.3.0 - 2026-02-20\n\n### Features\n\n- **api:** first export endpoint\n' > CHANGELOG.md
git add CHANGELOG.md; commit "chore(release): v1.3.0"
git tag v1.3.0
mkdir -p src assets
printf 'def export_csv(rows):\n    return rows\n' > src/export.py; git add src; commit "feat(api): add CSV export endpoint"
printf 'def total(cart):\n    return sum(cart or [])\n' > src/cart.py; git add src; commit "fix: handle empty cart totals"
python3 -c "import sys; sys.stdout.buffer.write(bytes(i * 7 % 251 for i in range(1_500_000)))" > assets/demo.bin
git add assets; commit "Update stuff" root@localhost
printf 'Exports are limited to 10,000 rows.\n' >> README.md; git add README.md; commit "docs: document export limits"
git checkout -q -b fix/typo
printf 'LABEL = "Place order"\n' > src/ui.py; git add src; commit "fix(ui): correct checkout button label"
git checkout -q main
printf 'python_requires = ">=3.9"\n' > setup.cfg; git add setup.cfg; commit "feat!: drop Python 3.8 support"
day=$((day + 1))
GIT_AUTHOR_DATE="2026-01-$(printf %02d $((4 + day)))T10:00:00+00:00" \
  GIT_COMMITTER_DATE="2026-01-$(printf %02d $((4 + day)))T10:00:00+00:00" \
  git merge -q --no-ff -m "Merge branch 'fix/typo'" fix/typo
GIT_COMMITTER_DATE="2026-03-14T09:30:00+00:00" \
  git commit -q --allow-empty -m "WIP" --author "dev <dev@example.com>" --date "2026-03-14T09:30:00+00:00"
'''
# What the model wrote first: `git commit` in a fresh image has no identity and stops the build.
MAKE_REPO_FIRST = "#!/bin/bash\nset -euo pipefail\n" + MAKE_REPO_BODY
MAKE_REPO_FIXED = ("#!/bin/bash\nset -euo pipefail\n"
                   "# A fresh image has no git identity: name the author and committer of the fixture history.\n"
                   "export GIT_AUTHOR_NAME=\"Maria Quarry\" GIT_AUTHOR_EMAIL=maria@quarrylabs.dev\n"
                   "export GIT_COMMITTER_NAME=\"Maria Quarry\" GIT_COMMITTER_EMAIL=maria@quarrylabs.dev\n"
                   + MAKE_REPO_BODY)

GIT_AUDIT = r'''python3 - <<'PY'
# git-history-audit over commits.tsv and large-blobs.tsv in the current directory
import csv, json, re

CONVENTIONAL = re.compile(r"^(feat|fix|docs|style|refactor|perf|test|build|ci|chore|revert)(\([\w./-]+\))?!?: \S")
PLACEHOLDER_EMAIL = re.compile(r"(@localhost|@example\.(com|org)|^root@|\.local$)")
findings = {"nonconventional": [], "placeholder_email": [], "merge_commits": [], "large_blobs": []}
total = 0
with open("/tmp/audit/commits.tsv", encoding="utf-8") as fh:
    for sha, email, parents, subject in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
        total += 1
        short = sha[:10]
        if len(parents.split()) > 1:
            findings["merge_commits"].append(short)
            continue
        if not CONVENTIONAL.match(subject):
            findings["nonconventional"].append({"commit": short, "subject": subject})
        if PLACEHOLDER_EMAIL.search(email):
            findings["placeholder_email"].append({"commit": short, "email": email})
with open("/tmp/audit/large-blobs.tsv", encoding="utf-8") as fh:
    for line in fh:
        size, _, path = line.rstrip("\n").partition("\t")
        findings["large_blobs"].append({"path": path, "bytes": int(size)})
summary = {k: len(v) for k, v in findings.items()}
json.dump({"commits": total, "summary": summary, "findings": findings}, open("/app/out/git-audit.json", "w"), indent=2)
print(json.dumps(summary))
PY'''

MAKE_CHANGELOG = r'''python3 - "$@" <<'PY'
# changelog-from-git: VERSION DATE, reading /tmp/audit/range.tsv
import re, sys

version, date = sys.argv[1:3]
SUBJECT = re.compile(r"^(?P<type>\w+)(\((?P<scope>[^)]+)\))?(?P<bang>!)?: (?P<text>.+)$")
SECTIONS = [("breaking", "Breaking changes"), ("feat", "Features"), ("fix", "Fixes"),
            ("docs", "Documentation"), ("other", "Other")]
groups = {key: [] for key, _ in SECTIONS}
for line in open("/tmp/audit/range.tsv", encoding="utf-8"):
    sha, _, subject = line.rstrip("\n").partition("\t")
    m = SUBJECT.match(subject)
    if not m:
        groups["other"].append(f"{subject} ({sha})")
        continue
    scope = f"**{m['scope']}:** " if m["scope"] else ""
    entry = f"{scope}{m['text']} ({sha})"
    if m["bang"]:
        groups["breaking"].append(entry)
    groups[m["type"] if m["type"] in groups else "other"].append(entry)
out = [f"## {version} - {date}", ""]
for key, title in SECTIONS:
    if groups[key]:
        out += [f"### {title}", ""] + [f"- {e}" for e in groups[key]] + [""]
print("\n".join(out))
PY'''


def _git() -> DemoTask:
    instruction = """# Audit the export service's git history and write the v1.4.0 changelog

The repository `/app/repo` is about to be released as v1.4.0. Do two things, without committing,
tagging or rewriting anything in the repository:

1. Audit the whole history into `/app/out/git-audit.json`:
   `{"commits": N, "summary": {...}, "findings": {...}}` where `findings` has
   - `nonconventional`: `{"commit", "subject"}` for each non-merge commit whose subject is not a
     Conventional Commit (`type(scope)!: text` with type feat, fix, docs, style, refactor, perf,
     test, build, ci, chore or revert),
   - `placeholder_email`: `{"commit", "email"}` for each non-merge commit whose author email is a
     placeholder (`@localhost`, `@example.com`/`.org`, `root@...`, `*.local`),
   - `merge_commits`: the merge commits,
   - `large_blobs`: `{"path", "bytes"}` for every blob over 1 MiB anywhere in history;
   commits are named by the first 10 characters of their hash; `summary` counts each list and
   `commits` is the number of commits in the history.
2. Add the release notes for v1.4.0 to `/app/repo/CHANGELOG.md`: a section `## v1.4.0 - 2026-03-14`
   (the date of the last commit) right below the `# Changelog` title and above the older sections,
   covering the non-merge commits since the tag `v1.3.0`, oldest first, grouped under
   `### Breaking changes` (commits marked `!`, also listed under their type), `### Features`,
   `### Fixes`, `### Documentation` and `### Other` (empty groups left out). Each entry is
   `- <scope prefix><text> (<7-character hash>)` with the scope written as `**scope:** `; subjects
   that are not Conventional Commits go under Other as they are.
"""
    solve_sh = ("#!/bin/bash\nset -euo pipefail\n"
                + _function("audit_history", GIT_AUDIT) + _function("make_changelog", MAKE_CHANGELOG)
                + "mkdir -p /app/out /tmp/audit\ncd /app/repo\n"
                + "git log --format='%H%x09%ae%x09%p%x09%s' > /tmp/audit/commits.tsv\n"
                + "git rev-list --objects --all \\\n"
                  "  | git cat-file --batch-check='%(objecttype) %(objectname) %(objectsize) %(rest)' \\\n"
                  "  | awk '$1 == \"blob\" && $3 > 1048576 {print $3 \"\\t\" $4}' | sort -rn > /tmp/audit/large-blobs.tsv\n"
                + "audit_history\n"
                + "PREV=$(git describe --tags --abbrev=0)\n"
                + "git log \"$PREV..HEAD\" --no-merges --reverse --format='%h%x09%s' > /tmp/audit/range.tsv\n"
                + "make_changelog v1.4.0 \"$(git log -1 --format=%cs)\" > /tmp/audit/section.md\n"
                + "{ head -n 2 CHANGELOG.md; cat /tmp/audit/section.md; tail -n +3 CHANGELOG.md; } > /tmp/audit/CHANGELOG.new\n"
                + "cat /tmp/audit/CHANGELOG.new > CHANGELOG.md\n")
    test_py = '''"""The history audit and the v1.4.0 changelog, checked against git itself (read-only)."""
import json
import subprocess
from pathlib import Path

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True, text=True).stdout


def audit():
    return json.loads(Path("/app/out/git-audit.json").read_text())


def short(rev, n=10):
    return git("rev-parse", rev).strip()[:n]


def test_the_audit_counts_every_commit():
    data = audit()
    assert data["commits"] == int(git("rev-list", "--count", "HEAD")) == 10
    assert data["summary"] == {"nonconventional": 2, "placeholder_email": 2, "merge_commits": 1, "large_blobs": 1}


def test_nonconventional_subjects_and_placeholder_emails_are_found():
    findings = audit()["findings"]
    assert sorted(f["subject"] for f in findings["nonconventional"]) == ["Update stuff", "WIP"]
    assert sorted(f["email"] for f in findings["placeholder_email"]) == ["dev@example.com", "root@localhost"]
    wip = next(f for f in findings["nonconventional"] if f["subject"] == "WIP")
    assert wip["commit"] == short("HEAD")


def test_the_merge_commit_and_the_large_blob_are_found():
    findings = audit()["findings"]
    assert findings["merge_commits"] == [git("rev-list", "--merges", "HEAD").strip()[:10]]
    assert findings["large_blobs"] == [{"path": "assets/demo.bin", "bytes": 1500000}]


def changelog():
    return Path(REPO, "CHANGELOG.md").read_text(encoding="utf-8")


def section(title):
    body = changelog().split("## v1.4.0 - 2026-03-14\\n", 1)[1].split("\\n## ", 1)[0]
    part = body.split(f"### {title}\\n", 1)[1].split("\\n### ", 1)[0]
    return [line for line in part.splitlines() if line.startswith("- ")]


def sha_of(subject):
    return git("log", "--format=%h", "--fixed-strings", f"--grep={subject}", "-n", "1").strip()


def test_the_new_section_sits_between_the_title_and_the_older_ones():
    lines = changelog().splitlines()
    assert lines[:3] == ["# Changelog", "", "## v1.4.0 - 2026-03-14"]
    assert changelog().index("## v1.4.0") < changelog().index("## v1.3.0 - 2026-02-20")
    assert "- **api:** first export endpoint" in changelog()


def test_commits_since_the_tag_are_grouped():
    assert section("Breaking changes") == [f"- drop Python 3.8 support ({sha_of('drop Python 3.8')})"]
    assert section("Features") == [f"- **api:** add CSV export endpoint ({sha_of('add CSV export')})",
                                   f"- drop Python 3.8 support ({sha_of('drop Python 3.8')})"]
    assert section("Fixes") == [f"- handle empty cart totals ({sha_of('handle empty cart')})",
                                f"- **ui:** correct checkout button label ({sha_of('checkout button')})"]
    assert section("Documentation") == [f"- document export limits ({sha_of('document export')})"]
    assert section("Other") == [f"- Update stuff ({sha_of('Update stuff')})", f"- WIP ({sha_of('WIP')})"]
    assert "initial import" not in changelog() and "Merge branch" not in changelog()


def test_the_repository_is_otherwise_untouched():
    assert git("status", "--porcelain") == " M CHANGELOG.md\\n"
    assert git("log", "-1", "--format=%s").strip() == "WIP"
    assert git("tag").split() == ["v1.3.0"]
'''
    materialized_note = ("git commit needs an author identity, and a fresh image has none: init.sh stopped at "
                         "the first commit. init.sh now exports GIT_AUTHOR_NAME/EMAIL and GIT_COMMITTER_NAME/EMAIL "
                         "for the fixture history (per-commit dates and the placeholder emails are kept).")
    return DemoTask(
        key="git-release", skills=frozenset({"changelog-from-git", "git-history-audit"}),
        marker="/app/out/git-audit.json",
        manifest={"workdir": "/app", "directories": ["/app/repo", "/app/out"],
                  "files": [{"path": "/app/repo", "purpose": "a git repository with ten commits, a tag v1.3.0, a "
                             "merge, placeholder emails and a 1.5 MB blob, created at build time", "format": "git"},
                            {"path": "/app/repo/CHANGELOG.md", "purpose": "changelog with the v1.3.0 section",
                             "format": "Markdown"}],
                  "services": [], "dependencies": ["git", "python3", "jq"],
                  "distractors": ["commits before the tag", "a merge commit", "a commit on a merged branch"],
                  "cross_file_relations": ["commits since v1.3.0 -> the new CHANGELOG section"]},
        files={}, dockerfile="FROM {base}\nWORKDIR /app\nCOPY init.sh /usr/local/bin/facet-init.sh\n"
                             "RUN bash /usr/local/bin/facet-init.sh\n",
        init_script=MAKE_REPO_FIXED, first_init_script=MAKE_REPO_FIRST, repair_diagnosis=materialized_note,
        init_checks=["git -C /app/repo rev-parse --verify v1.3.0", "test \"$(git -C /app/repo rev-list --count HEAD)\" -eq 10"],
        instruction=instruction, solve_sh=solve_sh, test_py=test_py)
