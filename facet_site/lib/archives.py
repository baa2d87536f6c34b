"""Unpacking uploaded skill archives (.zip, .tar, .tar.gz/.tgz) into an ingest area, Django-free.

Archives are untrusted. `unpack()` writes only regular files and directories, only below `dest`,
member by member, so one bad member is reported and skipped while the rest still extracts:

* names that are absolute, carry a drive letter, contain a `..` component or a NUL are skipped;
* links of every kind (tar symlinks and hardlinks, zip entries whose Unix mode is S_IFLNK) are
  skipped, even ones that would stay inside `dest`: skills are read without following links
  anyway, and not creating them removes a whole class of escape tricks;
* devices, fifos and other special members are skipped;
* encrypted zip members are skipped;
* a member that expands beyond `max_member_bytes` is removed and skipped;
* extraction stops (keeping what was already written) once the archive has expanded beyond
  `max_total_bytes` or has more than `max_entries` members.

Sizes are counted while decompressing; header sizes are only used to skip a member early, never
trusted to be small. A file keeps its permission bits (a task's 0600 key file or 0750 script comes
back as it went in) without setuid, setgid or sticky, and always readable and writable by its owner
so facet can read it; a member without Unix mode bits (zips made on Windows) is 0644. Directories
are 0755; timestamps and owners are not restored.
Duplicate member names keep the first copy.
"""
from __future__ import annotations

import os
import re
import stat
import tarfile
import zipfile
from pathlib import Path

from facet_site.lib.skillformat import SourceProblem

__all__ = ["ARCHIVE_SUFFIXES", "is_archive", "tree_bytes", "unpack"]

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_COPY_CHUNK = 1 << 16
_DRIVE = re.compile(r"^[A-Za-z]:")
_O_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


class _Stop(Exception):
    """Extraction of the whole archive must end (limit reached or archive corrupt)."""


class _Skip(Exception):
    """This member is skipped; the message says why."""


def is_archive(path: Path) -> bool:
    """True when the file name says zip or tar (optionally gzip/bzip2/xz compressed).

    Decided by name only: `unpack()` checks the content and reports a mismatch as a problem.
    """
    name = Path(path).name.lower()
    return name.endswith(ARCHIVE_SUFFIXES)


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files below `root` (links not followed; 0 when it does not exist), for
    caps on extraction areas: what unpacking wrote, not what the archive's headers claim."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:  # removed meanwhile
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def unpack(
    archive: Path,
    dest: Path,
    *,
    max_total_bytes: int = 500_000_000,
    max_entries: int = 200_000,
    max_member_bytes: int = 50_000_000,
) -> list[SourceProblem]:
    """Extract `archive` into `dest` (created if missing); returns the problems, empty when clean.

    Problem paths are archive member names (or the archive's file name for whole-archive
    problems); messages name the archive and the member.
    """
    archive = Path(archive)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    extractor = _Extractor(archive, dest, max_total_bytes, max_entries, max_member_bytes)
    name = archive.name.lower()
    try:
        if name.endswith(".zip"):
            extractor.zip()
        elif name.endswith(ARCHIVE_SUFFIXES):
            extractor.tar()
        elif zipfile.is_zipfile(archive):
            extractor.zip()
        else:
            extractor.tar()
    except _Stop:
        pass
    return extractor.problems


class _Extractor:
    def __init__(self, archive: Path, dest: Path, max_total: int, max_entries: int, max_member: int):
        self.archive = archive
        self.label = archive.name
        self.dest = os.path.realpath(dest)
        self.max_total = max_total
        self.max_entries = max_entries
        self.max_member = max_member
        self.total = 0
        self.entries = 0
        self.is_tar = False
        self.problems: list[SourceProblem] = []

    # -- reporting ---------------------------------------------------------------------------

    def problem(self, entry: str, message: str) -> None:
        self.problems.append(SourceProblem(path=entry, message=f"{self.label}: {message}", field="archive"))

    def stop(self, entry: str, message: str):
        self.problem(entry, message)
        raise _Stop

    def count_entry(self, entry: str) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            self.stop(entry, f"more than {self.max_entries} entries; extraction stopped at {entry!r}")

    # -- formats -----------------------------------------------------------------------------

    def zip(self) -> None:
        try:
            zf = zipfile.ZipFile(self.archive)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            self.stop(self.label, f"not a readable zip archive ({exc})")
        with zf:
            for info in zf.infolist():
                entry = info.filename
                self.count_entry(entry)
                try:
                    rel = self.safe_name(entry)
                    # The high 16 bits are a Unix st_mode only when the zip was made on Unix (3);
                    # Windows tools leave them 0 and Python's writestr fills in 0600 for them.
                    mode = (info.external_attr >> 16) & 0xFFFF if info.create_system == 3 else 0
                    ftype = stat.S_IFMT(mode)
                    if ftype == stat.S_IFLNK:
                        raise _Skip("is a symlink; links are never extracted")
                    if info.is_dir() or ftype == stat.S_IFDIR:
                        self.make_dirs(rel, entry)
                        continue
                    if ftype and ftype != stat.S_IFREG:
                        raise _Skip(f"is a {_mode_kind(ftype)}, not a regular file")
                    if info.flag_bits & 0x1:
                        raise _Skip("is encrypted")
                    if info.file_size > self.max_member:
                        raise _Skip(f"declares {info.file_size} bytes, over the per-entry limit of {self.max_member}")
                    self.write(rel, entry, lambda: zf.open(info), mode=mode)
                except _Skip as skip:
                    self.problem(entry, f"entry {entry!r} {skip}; skipped")

    def tar(self) -> None:
        self.is_tar = True
        try:
            tf = tarfile.open(self.archive, "r:*")
        except (tarfile.TarError, OSError, EOFError) as exc:
            self.stop(self.label, f"not a readable tar archive ({exc})")
        with tf:
            last = None
            members = iter(tf)
            while True:
                try:
                    member = next(members)
                except StopIteration:
                    break
                except (tarfile.TarError, OSError, EOFError) as exc:
                    after = f" after entry {last!r}" if last else ""
                    self.stop(last or self.label, f"archive is truncated or corrupt{after} ({exc}); extraction stopped")
                entry = member.name
                last = entry
                self.count_entry(entry)
                try:
                    rel = self.safe_name(entry)
                    if member.issym() or member.islnk():
                        raise _Skip(f"is a {'symlink' if member.issym() else 'hardlink'} to {member.linkname!r}; "
                                    "links are never extracted")
                    if member.ischr() or member.isblk():
                        raise _Skip("is a device file")
                    if member.isfifo():
                        raise _Skip("is a fifo")
                    # The standard "data" filter is a second opinion on what we already checked.
                    try:
                        tarfile.data_filter(member, self.dest)
                    except tarfile.FilterError as exc:
                        raise _Skip(f"is rejected by the tar data filter ({exc})") from None
                    if member.isdir():
                        self.make_dirs(rel, entry)
                        continue
                    if not member.isreg():
                        raise _Skip("is not a regular file or directory")
                    if member.size > self.max_member:
                        raise _Skip(f"is {member.size} bytes, over the per-entry limit of {self.max_member}")
                    self.write(rel, entry, lambda: tf.extractfile(member), mode=member.mode)
                except _Skip as skip:
                    self.problem(entry, f"entry {entry!r} {skip}; skipped")

    # -- safety ------------------------------------------------------------------------------

    def safe_name(self, entry: str) -> str:
        """The member's path relative to dest, or _Skip."""
        if "\0" in entry:
            raise _Skip("has a NUL byte in its name")
        name = entry.replace("\\", "/")  # zips made on Windows use backslashes
        if name.startswith("/"):
            raise _Skip("has an absolute path")
        if _DRIVE.match(name):
            raise _Skip("has a drive letter")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise _Skip("has a '..' path component")
        if not parts:
            raise _Skip("has an empty name")
        return "/".join(parts)

    def inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self.dest or real.startswith(self.dest + os.sep)

    def make_dirs(self, rel: str, entry: str) -> str:
        current = self.dest
        for part in rel.split("/"):
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                try:
                    os.mkdir(current, 0o755)
                except OSError as exc:
                    raise _Skip(f"cannot create directory ({exc.strerror})") from None
                continue
            # dest may hold earlier content; never walk through a link or over a file.
            if not stat.S_ISDIR(st.st_mode):
                raise _Skip(f"needs directory {part!r} but a file or link is in the way")
        if not self.inside(current):
            raise _Skip("would be written outside the destination")
        return current

    def write(self, rel: str, entry: str, open_member, *, mode: int) -> None:
        parent_rel, _, base = rel.rpartition("/")
        parent = self.make_dirs(parent_rel, entry) if parent_rel else self.dest
        target = os.path.join(parent, base)
        try:
            fd = os.open(target, _O_WRITE, 0o600)
        except FileExistsError:
            raise _Skip("duplicates an earlier entry (first copy kept)") from None
        except OSError as exc:
            raise _Skip(f"cannot be written ({exc.strerror})") from None
        written = 0
        ok = False
        try:
            with os.fdopen(fd, "wb") as out:
                # fchmod, not open()'s mode: the process umask must not change what the archive says
                os.fchmod(out.fileno(), file_mode(mode))
                src = open_member()
                if src is None:
                    raise _Skip("has no data")
                with src:
                    while True:
                        # Counted per chunk: compressed members may expand far beyond their headers.
                        chunk = src.read(_COPY_CHUNK)
                        if not chunk:
                            break
                        written += len(chunk)
                        self.total += len(chunk)
                        if written > self.max_member:
                            raise _Skip(f"expands beyond the per-entry limit of {self.max_member} bytes")
                        if self.total > self.max_total:
                            self.stop(entry, f"archive expands beyond {self.max_total} bytes; extraction stopped "
                                             f"at entry {entry!r}")
                        out.write(chunk)
            ok = True
        except (tarfile.ReadError, EOFError) as exc:
            if self.is_tar:  # a tar stream cannot be resynchronised: nothing after this is readable
                self.stop(entry, f"archive is truncated or corrupt at entry {entry!r} ({exc}); extraction stopped")
            raise _Skip(f"cannot be extracted ({type(exc).__name__}: {exc})") from None
        except (zipfile.BadZipFile, tarfile.TarError, OSError, RuntimeError, NotImplementedError) as exc:
            # RuntimeError/NotImplementedError: zipfile's "encrypted"/"unsupported compression".
            raise _Skip(f"cannot be extracted ({type(exc).__name__}: {exc})") from None
        finally:
            if not ok:
                try:
                    os.unlink(target)
                except OSError:
                    pass


def file_mode(member_mode: int) -> int:
    """The permission bits an extracted file gets from its archive member's mode."""
    perms = member_mode & 0o777
    if not perms:
        return 0o644
    return perms | 0o600


def _mode_kind(ftype: int) -> str:
    return {
        stat.S_IFIFO: "fifo",
        stat.S_IFCHR: "character device",
        stat.S_IFBLK: "block device",
        stat.S_IFSOCK: "socket",
    }.get(ftype, "special file")
