"""Unpacking untrusted archives: traversal, links, special members, bombs, limits."""
from __future__ import annotations

import io
import stat
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from facet_site.lib.archives import is_archive, unpack


def files_under(dest: Path) -> dict[str, bytes]:
    return {p.relative_to(dest).as_posix(): p.read_bytes() for p in sorted(dest.rglob("*")) if p.is_file()}


def messages(problems) -> list[str]:
    return [p.message for p in problems]


def make_zip(path: Path, members: list, *, compression=zipfile.ZIP_DEFLATED) -> Path:
    """members: (name, data) or (ZipInfo, data)."""
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def zip_symlink(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def make_tar(path: Path, members: list, mode: str = "w") -> Path:
    """members: (TarInfo, data or None)."""
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def tar_file(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def tar_special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 8, 0
    return info, None


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [("skills.zip", True), ("a.TAR", True), ("a.tar.gz", True), ("a.tgz", True), ("a.tar.xz", True),
     ("a.gz", False), ("SKILL.md", False), ("zip", False), ("a.zip.txt", False)],
)
def test_is_archive(name, expected):
    assert is_archive(Path(name)) is expected


def test_zip_extracts_files_and_directories(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [
        ("owner/skill/", b""),
        ("owner/skill/SKILL.md", b"---\nname: s\n---\n"),
        ("owner/skill/scripts/run.sh", b"echo hi\n"),
        ("./owner/other/SKILL.md", b"x"),
        ("win\\style\\file.txt", b"w"),
    ])

    problems = unpack(archive, tmp_path / "out")

    assert problems == []
    assert files_under(tmp_path / "out") == {
        "owner/other/SKILL.md": b"x",
        "owner/skill/SKILL.md": b"---\nname: s\n---\n",
        "owner/skill/scripts/run.sh": b"echo hi\n",
        "win/style/file.txt": b"w",
    }


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("../evil.txt", "has a '..' path component"),
        ("a/../../evil.txt", "has a '..' path component"),
        ("/etc/evil.txt", "has an absolute path"),
        ("C:/evil.txt", "has a drive letter"),
        ("c:evil.txt", "has a drive letter"),
        ("..\\evil.txt", "has a '..' path component"),
    ],
)
def test_zip_rejects_escaping_names_and_keeps_the_rest(tmp_path, bad, reason):
    dest = tmp_path / "deep" / "out"
    archive = make_zip(tmp_path / "s.zip", [("good/SKILL.md", b"ok"), (bad, b"pwned"), ("good/after.txt", b"after")])

    problems = unpack(archive, dest)

    assert files_under(dest) == {"good/SKILL.md": b"ok", "good/after.txt": b"after"}
    assert not (tmp_path / "deep" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()
    [problem] = problems
    assert problem.path == bad
    assert problem.message == f"s.zip: entry {bad!r} {reason}; skipped"
    assert problem.field == "archive"


def test_zip_symlink_entries_are_skipped(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [(zip_symlink("s/link", "/etc/passwd"), b"/etc/passwd"), ("s/ok", b"ok")])

    problems = unpack(archive, tmp_path / "out")

    assert files_under(tmp_path / "out") == {"s/ok": b"ok"}
    assert not (tmp_path / "out" / "s" / "link").exists()
    assert messages(problems) == ["s.zip: entry 's/link' is a symlink; links are never extracted; skipped"]


def test_zip_special_file_modes_are_skipped(tmp_path):
    info = zipfile.ZipInfo("fifo")
    info.create_system = 3
    info.external_attr = (stat.S_IFIFO | 0o644) << 16
    archive = make_zip(tmp_path / "s.zip", [(info, b""), ("ok", b"ok")])

    problems = unpack(archive, tmp_path / "out")

    assert files_under(tmp_path / "out") == {"ok": b"ok"}
    assert messages(problems) == ["s.zip: entry 'fifo' is a fifo, not a regular file; skipped"]


def test_zip_executable_bit_is_kept_and_other_mode_bits_are_not(tmp_path):
    info = zipfile.ZipInfo("run.sh")
    info.create_system = 3
    info.external_attr = (stat.S_IFREG | stat.S_ISUID | 0o777) << 16
    archive = make_zip(tmp_path / "s.zip", [(info, b"#!/bin/sh\n"), ("plain.txt", b"x")])

    assert unpack(archive, tmp_path / "out") == []

    assert stat.S_IMODE((tmp_path / "out" / "run.sh").stat().st_mode) & 0o7000 == 0
    assert (tmp_path / "out" / "run.sh").stat().st_mode & 0o100
    assert not (tmp_path / "out" / "plain.txt").stat().st_mode & 0o111


def test_permission_bits_come_back_as_archived_and_owner_can_always_read(tmp_path):
    """A dataset's 0600 key file and 0750 script keep their modes through an archive import."""
    members = [tar_file("task/secret.key", b"k", mode=0o600), tar_file("task/run.sh", b"#!/bin/sh\n", mode=0o750),
               tar_file("task/locked.txt", b"x", mode=0o044), tar_file("task/data.csv", b"a\n", mode=0o664)]
    unpack(make_tar(tmp_path / "t.tar", members), tmp_path / "out")
    windows = zipfile.ZipInfo("notes.txt")  # no Unix mode bits at all
    windows.create_system = 0
    unpack(make_zip(tmp_path / "w.zip", [(windows, b"n")]), tmp_path / "zout")

    def mode(p):
        return stat.S_IMODE(p.stat().st_mode)
    out = tmp_path / "out" / "task"
    assert (mode(out / "secret.key"), mode(out / "run.sh"), mode(out / "data.csv")) == (0o600, 0o750, 0o664)
    assert mode(out / "locked.txt") == 0o644  # owner read/write added: facet must read what it stores
    assert mode(tmp_path / "zout" / "notes.txt") == 0o644


def test_zip_bomb_member_is_stopped_by_the_per_entry_limit(tmp_path):
    bomb = b"\0" * 3_000_000  # compresses to a few kilobytes
    archive = make_zip(tmp_path / "s.zip", [("a/ok.txt", b"ok"), ("a/bomb.bin", bomb), ("a/later.txt", b"later")])
    assert archive.stat().st_size < 50_000

    problems = unpack(archive, tmp_path / "out", max_member_bytes=1_000_000)

    assert files_under(tmp_path / "out") == {"a/ok.txt": b"ok", "a/later.txt": b"later"}
    [problem] = problems
    assert problem.path == "a/bomb.bin"
    assert "over the per-entry limit of 1000000" in problem.message


def test_zip_bomb_with_lying_header_is_stopped_by_the_streaming_counter(tmp_path):
    """Headers claim a tiny member; only counting the bytes actually produced catches it."""
    bomb = b"A" * 2_000_000
    archive = make_zip(tmp_path / "s.zip", [("ok.txt", b"ok"), ("bomb.txt", bomb)])
    data = bytearray(archive.read_bytes())
    # Rewrite the uncompressed size of bomb.txt in its central directory record to 100 bytes.
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(b"bomb.txt"))
    assert data[central + 46:central + 54] == b"bomb.txt"
    struct.pack_into("<I", data, central + 24, 100)
    archive.write_bytes(bytes(data))

    problems = unpack(archive, tmp_path / "out", max_member_bytes=1_000_000, max_total_bytes=1_000_000)

    assert files_under(tmp_path / "out") == {"ok.txt": b"ok"}
    [problem] = problems
    assert problem.path == "bomb.txt"
    assert "cannot be extracted" in problem.message  # only 100 bytes read, then the CRC check fails
    assert not (tmp_path / "out" / "bomb.txt").exists()


def test_total_expansion_limit_stops_extraction(tmp_path):
    members = [(f"f{i}.bin", b"\0" * 400_000) for i in range(5)]
    archive = make_zip(tmp_path / "s.zip", members)

    problems = unpack(archive, tmp_path / "out", max_total_bytes=1_000_000)

    assert sorted(files_under(tmp_path / "out")) == ["f0.bin", "f1.bin"]  # the partial third is removed
    [problem] = problems
    assert problem.path == "f2.bin"
    assert problem.message == "s.zip: archive expands beyond 1000000 bytes; extraction stopped at entry 'f2.bin'"


def test_entry_count_limit_stops_extraction(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [(f"f{i}", b"x") for i in range(10)])

    problems = unpack(archive, tmp_path / "out", max_entries=4)

    assert len(files_under(tmp_path / "out")) == 4
    assert messages(problems) == ["s.zip: more than 4 entries; extraction stopped at 'f4'"]


def test_duplicate_entries_keep_the_first_copy(tmp_path):
    archive = tmp_path / "s.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.txt", b"first")
        with pytest.warns(UserWarning):
            zf.writestr("a.txt", b"second")

    problems = unpack(archive, tmp_path / "out")

    assert files_under(tmp_path / "out") == {"a.txt": b"first"}
    assert messages(problems) == ["s.zip: entry 'a.txt' duplicates an earlier entry (first copy kept); skipped"]


def test_existing_symlink_in_dest_is_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "a").symlink_to(outside, target_is_directory=True)
    archive = make_zip(tmp_path / "s.zip", [("a/x.txt", b"pwned"), ("b/y.txt", b"ok")])

    problems = unpack(archive, dest)

    assert list(outside.iterdir()) == []
    assert (dest / "b" / "y.txt").read_bytes() == b"ok"
    assert messages(problems) == ["s.zip: entry 'a/x.txt' needs directory 'a' but a file or link is in the way; skipped"]


def test_corrupt_zip_is_a_problem(tmp_path):
    archive = tmp_path / "bad.zip"
    archive.write_bytes(b"PK\x03\x04 this is not really a zip")

    problems = unpack(archive, tmp_path / "out")

    [problem] = problems
    assert problem.path == "bad.zip" and problem.message.startswith("bad.zip: not a readable zip archive")


def test_encrypted_zip_member_is_skipped(tmp_path):
    archive = make_zip(tmp_path / "s.zip", [("secret.txt", b"s"), ("ok.txt", b"ok")])
    data = bytearray(archive.read_bytes())
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(b"secret.txt"))
    struct.pack_into("<H", data, central + 8, data[central + 8] | 0x1)  # general purpose flag: encrypted
    archive.write_bytes(bytes(data))

    problems = unpack(archive, tmp_path / "out")

    assert files_under(tmp_path / "out") == {"ok.txt": b"ok"}
    assert messages(problems) == ["s.zip: entry 'secret.txt' is encrypted; skipped"]


# --------------------------------------------------------------------------------------------
# tar
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix, mode", [(".tar", "w"), (".tar.gz", "w:gz"), (".tgz", "w:gz")])
def test_tar_extracts_good_members_and_skips_every_bad_kind(tmp_path, suffix, mode):
    dir_info = tarfile.TarInfo("skill/scripts")
    dir_info.type = tarfile.DIRTYPE
    dir_info.mode = 0o755
    members = [
        tar_file("skill/SKILL.md", b"---\nname: s\n---\n"),
        (dir_info, None),
        tar_file("skill/scripts/run.sh", b"echo hi\n", mode=0o4755),
        tar_file("../escape.txt", b"pwned"),
        tar_file("/abs/escape.txt", b"pwned"),
        tar_special("skill/link-out", tarfile.SYMTYPE, "/etc/passwd"),
        tar_special("skill/link-in", tarfile.SYMTYPE, "SKILL.md"),
        tar_special("skill/hard", tarfile.LNKTYPE, "skill/SKILL.md"),
        tar_special("skill/dev", tarfile.CHRTYPE),
        tar_special("skill/disk", tarfile.BLKTYPE),
        tar_special("skill/pipe", tarfile.FIFOTYPE),
        tar_file("skill/last.txt", b"last"),
    ]
    archive = make_tar(tmp_path / f"s{suffix}", members, mode)

    problems = unpack(archive, tmp_path / "out")

    assert files_under(tmp_path / "out") == {
        "skill/SKILL.md": b"---\nname: s\n---\n",
        "skill/scripts/run.sh": b"echo hi\n",
        "skill/last.txt": b"last",
    }
    run = (tmp_path / "out" / "skill" / "scripts" / "run.sh").stat().st_mode
    assert run & 0o100 and not run & stat.S_ISUID
    assert not (tmp_path / "escape.txt").exists()
    name = f"s{suffix}"
    assert messages(problems) == [
        f"{name}: entry '../escape.txt' has a '..' path component; skipped",
        f"{name}: entry '/abs/escape.txt' has an absolute path; skipped",
        f"{name}: entry 'skill/link-out' is a symlink to '/etc/passwd'; links are never extracted; skipped",
        f"{name}: entry 'skill/link-in' is a symlink to 'SKILL.md'; links are never extracted; skipped",
        f"{name}: entry 'skill/hard' is a hardlink to 'skill/SKILL.md'; links are never extracted; skipped",
        f"{name}: entry 'skill/dev' is a device file; skipped",
        f"{name}: entry 'skill/disk' is a device file; skipped",
        f"{name}: entry 'skill/pipe' is a fifo; skipped",
    ]
    assert [p.path for p in problems][:2] == ["../escape.txt", "/abs/escape.txt"]


def test_tar_member_over_the_limit_is_skipped(tmp_path):
    archive = make_tar(tmp_path / "s.tar.gz", [tar_file("big", b"\0" * 2_000_000), tar_file("ok", b"ok")], "w:gz")

    problems = unpack(archive, tmp_path / "out", max_member_bytes=1_000_000)

    assert files_under(tmp_path / "out") == {"ok": b"ok"}
    assert messages(problems) == ["s.tar.gz: entry 'big' is 2000000 bytes, over the per-entry limit of 1000000; skipped"]


def test_tar_total_limit_stops_extraction(tmp_path):
    archive = make_tar(tmp_path / "s.tgz", [tar_file(f"f{i}", b"\0" * 600_000) for i in range(3)], "w:gz")

    problems = unpack(archive, tmp_path / "out", max_total_bytes=1_000_000)

    assert sorted(files_under(tmp_path / "out")) == ["f0"]
    assert messages(problems) == ["s.tgz: archive expands beyond 1000000 bytes; extraction stopped at entry 'f1'"]


def test_truncated_tar_keeps_what_was_extracted(tmp_path):
    archive = make_tar(tmp_path / "s.tar", [tar_file("a", b"a" * 600), tar_file("b", b"b" * 5000)])
    archive.write_bytes(archive.read_bytes()[:2048])

    problems = unpack(archive, tmp_path / "out")

    assert files_under(tmp_path / "out") == {"a": b"a" * 600}
    [problem] = problems
    assert problem.path == "b"
    assert problem.message.startswith("s.tar: archive is truncated or corrupt at entry 'b'")


def test_file_that_is_not_an_archive(tmp_path):
    archive = tmp_path / "notes.tar.gz"
    archive.write_bytes(b"hello, not gzip")

    [problem] = unpack(archive, tmp_path / "out")

    assert problem.path == "notes.tar.gz"
    assert problem.message.startswith("notes.tar.gz: not a readable tar archive")


def test_unpacked_skills_can_be_discovered(tmp_path):
    from facet_site.lib.skillformat import ParsedSkill, discover

    archive = make_zip(tmp_path / "s.zip", [
        ("o/s/SKILL.md", b"---\nname: s\ndescription: d\n---\nRun `jq .`\n"),
        ("o/s/_meta.json", b'{"owner": "o", "slug": "s"}'),
        ("../o/evil/SKILL.md", b"x"),
    ])

    problems = unpack(archive, tmp_path / "out")
    results = list(discover(tmp_path / "out"))

    assert len(problems) == 1
    assert [r.key for r in results if isinstance(r, ParsedSkill)] == ["o/s"]
