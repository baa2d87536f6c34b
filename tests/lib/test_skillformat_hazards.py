"""Reading skills from disk: unreadable SKILL.md and filesystem hazards (oversize, binary, symlinks, FIFOs, sockets, caps)."""
from __future__ import annotations

import hashlib
import os

import pytest

from facet_site.lib import skillformat
from facet_site.lib.skillformat import ParsedSkill, SourceProblem, discover

from tests.lib.skillformat_samples import GOOD_MD, by_key, make_skill, problems, write


# --------------------------------------------------------------------------------------------
# Unreadable SKILL.md and filesystem hazards
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "SKILL.md looks binary (NUL byte at offset 8)"),
        (b"---\nname: caf\xe9\n---\n", "SKILL.md is not valid UTF-8 (byte 0xe9 at offset 13)"),
        (b"\xef\xbb\xbf---\nname: \xff\n", "SKILL.md is not valid UTF-8 (byte 0xff at offset 13)"),
        (b"", "SKILL.md is empty"),
        (b" \n\n\t\n", "SKILL.md is empty"),
        ("---\nname: x\n---\n".encode("utf-16"), "SKILL.md is UTF-16 encoded; expected UTF-8"),
    ],
)
def test_unreadable_skill_md_becomes_a_skill_with_a_reason(tmp_path, content, reason):
    make_skill(tmp_path, "o/bin", content, files={"notes.txt": "hello\n"}, meta={"owner": "o", "slug": "bin"})

    [skill] = list(discover(tmp_path))

    assert isinstance(skill, ParsedSkill)
    assert skill.unreadable_reason == reason
    assert (skill.key, skill.name, skill.slug) == ("o/bin", "bin", "bin")
    assert skill.description == "" and skill.body == "" and skill.frontmatter == {}
    assert [f.path for f in skill.files] == ["_meta.json", "notes.txt"]
    assert len(skill.content_hash) == 64


def test_oversize_skill_md_is_a_problem(tmp_path):
    make_skill(tmp_path, "big", GOOD_MD + "x" * 2000)

    [result] = list(discover(tmp_path, max_file_bytes=1000))

    assert isinstance(result, SourceProblem)
    assert result.path == "big/SKILL.md"
    assert "over the limit of 1000 bytes" in result.message


def test_oversize_supporting_file_is_hashed_but_not_kept(tmp_path):
    payload = os.urandom(3000) + b"\x00"
    make_skill(tmp_path, "s", files={"assets/blob.bin": payload, "big.txt": "y" * 1500, "mid.txt": "z" * 700})

    [skill] = list(discover(tmp_path, max_file_bytes=1000, max_text_bytes=500))

    entries = {f.path: f for f in skill.files}
    blob = entries["assets/blob.bin"]
    assert (blob.path, blob.size, blob.sha256, blob.text, blob.is_binary) == (
        "assets/blob.bin", len(payload), hashlib.sha256(payload).hexdigest(), None, True)
    assert blob.content.note == "over 1000 bytes; not read"  # only its head was seen
    assert entries["big.txt"].text is None and entries["big.txt"].is_binary is False
    assert entries["big.txt"].sha256 == hashlib.sha256(b"y" * 1500).hexdigest()
    assert entries["mid.txt"].text is None and entries["mid.txt"].is_binary is False  # over max_text_bytes


def test_supporting_file_text_and_binary_detection(tmp_path):
    make_skill(tmp_path, "s", files={
        "references/b.md": "# Ref\n",
        "references/a.md": "\ufeffwith bom\n",
        "scripts/run.py": "print('hé')\n",
        "assets/logo.png": b"\x89PNG\x00\x00",
        "data/latin1.txt": b"caf\xe9\n",
    })

    [skill] = list(discover(tmp_path))

    entries = {f.path: f for f in skill.files}
    assert list(entries) == ["assets/logo.png", "data/latin1.txt", "references/a.md", "references/b.md", "scripts/run.py"]
    assert entries["scripts/run.py"].text == "print('hé')\n"
    assert entries["references/a.md"].text == "with bom\n"
    assert entries["assets/logo.png"].text is None and entries["assets/logo.png"].is_binary
    assert entries["data/latin1.txt"].text is None and entries["data/latin1.txt"].is_binary
    assert entries["references/b.md"].size == 6


def test_symlinked_skill_md_is_a_problem(tmp_path):
    target = write(tmp_path / "elsewhere.md", GOOD_MD)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "SKILL.md").symlink_to(target)

    [result] = list(discover(tmp_path))

    assert isinstance(result, SourceProblem)
    assert result.path == "s/SKILL.md"
    assert "symlink" in result.message and "never followed" in result.message


def test_symlinked_supporting_file_is_reported_and_the_skill_still_parses(tmp_path):
    secret = write(tmp_path / "outside" / "id_rsa", "PRIVATE KEY")
    skill_dir = make_skill(tmp_path, "s", files={"ok.txt": "fine\n"})
    (skill_dir / "leak.txt").symlink_to(secret)
    (skill_dir / "linked-dir").symlink_to(tmp_path / "outside", target_is_directory=True)

    results = list(discover(tmp_path))

    skill = by_key(results)["s"]
    assert [f.path for f in skill.files] == ["ok.txt"]
    assert {p.path for p in skill.problems} == {"s/leak.txt", "s/linked-dir"}
    assert all("symlink" in p.message for p in skill.problems)
    assert {p.path for p in problems(results)} == {"s/leak.txt", "s/linked-dir"}


def test_symlinked_directory_outside_skills_is_reported_not_followed(tmp_path):
    real = make_skill(tmp_path / "real", "s")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "link").symlink_to(real, target_is_directory=True)

    results = list(discover(tmp_path / "tree"))

    assert by_key(results) == {}
    [problem] = problems(results)
    assert problem.path == "link" and "not followed" in problem.message


def test_fifo_supporting_file_is_skipped_without_blocking(tmp_path):
    skill_dir = make_skill(tmp_path, "s", files={"ok.txt": "fine\n"})
    os.mkfifo(skill_dir / "pipe")

    results = list(discover(tmp_path))

    skill = by_key(results)["s"]
    assert [f.path for f in skill.files] == ["ok.txt"]
    [problem] = skill.problems
    assert problem.path == "s/pipe" and "fifo" in problem.message


def test_fifo_skill_md_is_a_problem_and_neighbours_still_parse(tmp_path):
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / "SKILL.md")
    make_skill(tmp_path, "b")

    results = list(discover(tmp_path))

    assert set(by_key(results)) == {"b"}
    [problem] = problems(results)
    assert problem.path == "a/SKILL.md" and "not a regular file (fifo)" in problem.message


def test_socket_in_a_skill_is_skipped(tmp_path):
    import socket

    skill_dir = make_skill(tmp_path, "s")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(skill_dir / "agent.sock"))
        [skill, problem] = list(discover(tmp_path))
    finally:
        sock.close()

    assert skill.files == []
    assert problem.path == "s/agent.sock" and "socket" in problem.message


def test_file_count_per_skill_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(skillformat.parse, "_MAX_FILES_PER_SKILL", 3)
    make_skill(tmp_path, "s", files={f"f{i}.txt": "x" for i in range(6)})

    [skill, problem] = list(discover(tmp_path))

    assert [f.path for f in skill.files] == ["f0.txt", "f1.txt", "f2.txt"]
    assert "more than 3 files" in problem.message


def test_unreadable_skill_md_is_a_problem(tmp_path, monkeypatch):
    make_skill(tmp_path, "locked")
    make_skill(tmp_path, "open")
    real = skillformat.parse._read_regular

    def deny(path, limit):
        if path.endswith(os.path.join("locked", "SKILL.md")):
            raise PermissionError(13, "Permission denied")
        return real(path, limit)

    monkeypatch.setattr(skillformat.parse, "_read_regular", deny)

    results = list(discover(tmp_path))

    assert set(by_key(results)) == {"open"}
    [problem] = problems(results)
    assert problem.path == "locked/SKILL.md"
    assert problem.message == "SKILL.md: cannot read: PermissionError: Permission denied"


def test_good_skills_next_to_bad_ones_come_through(tmp_path):
    make_skill(tmp_path, "o/good1", meta={"owner": "o", "slug": "good1"})
    make_skill(tmp_path, "o/yaml", "---\nname: [\n---\nx\n")
    make_skill(tmp_path, "o/binary", b"\x00\x01")
    make_skill(tmp_path, "o/big", "x" * 5000)
    make_skill(tmp_path, "o/nodesc", "---\nname: n\n---\n")
    (tmp_path / "o" / "fifo").mkdir()
    os.mkfifo(tmp_path / "o" / "fifo" / "SKILL.md")
    make_skill(tmp_path, "p/good2")

    results = list(discover(tmp_path, max_file_bytes=4000))

    skills = by_key(results)
    assert set(skills) == {"o/good1", "o/binary", "p/good2"}
    assert skills["o/binary"].unreadable_reason
    assert sorted(p.path for p in problems(results)) == [
        "o/big/SKILL.md", "o/fifo/SKILL.md", "o/nodesc/SKILL.md", "o/yaml/SKILL.md"
    ]
