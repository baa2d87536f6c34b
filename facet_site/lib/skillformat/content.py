"""What a supporting file holds when it is not small UTF-8 text: its kind from its first bytes
(a compiled program, an archive, an encrypted archive), and the texts a safety scan can still read
in it (UTF-16 and legacy-encoded scripts, text over the stored-text limit, the text members of a
zip). Django-free.

Why: a file that is not valid UTF-8 is not shown as text, and one stray byte in `install.sh`, a
PowerShell script saved as UTF-16 (what Windows PowerShell writes by default) or a script padded
past the stored-text limit would otherwise hide its commands from the scan. Every size here is
capped so a hostile package cannot make reading it expensive.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, replace
from typing import BinaryIO

from facet_site.lib.skillformat.middle import MIDDLE_SCAN_BYTES, MiddleScan, TextScanner
from facet_site.lib.skillformat.pickles import PICKLE_BYTES, PickleImport, looks_like_pickle, read_pickle

__all__ = ["FileContent", "EXECUTABLE_KINDS", "ARCHIVE_KINDS", "OPAQUE_ARCHIVE_KINDS", "inspect_bytes", "inspect_large_archive",
           "inspect_pickle", "kind_of", "named_like_program"]

SCAN_TEXT_CHARS = 2_000_000  # per text; the scanner reads no more of one file
# Of a text file over the reading limit, the scan reads this much at the start and as much at the
# end: padding a script past the limit hides neither a payload placed first nor one placed last.
OVERSIZED_PART_BYTES = SCAN_TEXT_CHARS // 2
ZIP_MEMBERS_LISTED = 200
ZIP_MEMBER_BYTES = 1_000_000  # a text member larger than this is not decompressed
ZIP_TEXT_BYTES = 4_000_000  # all text members of one archive together
_KIND_BYTES = 8192  # enough of a file's first bytes to name its kind
_ZIP_DIRECTORY_BYTES = 4_000_000  # a larger zip's directory is not parsed (~50,000 entries)
_ZIP_END_SEARCH = 22 + 65_535  # the end record and the longest comment it may carry
# A compressed tarball over the reading limit is unpacked as a stream, its members in order, up to
# this many unpacked bytes (gzip unpacks at a few hundred MB/s here; a bomb stops at the cap).
TARBALL_UNPACK_BYTES = 256_000_000

EXECUTABLE_KINDS = frozenset({"elf", "pe", "mach-o"})
ARCHIVE_KINDS = frozenset({"zip", "tar", "gzip", "bzip2", "xz", "7z", "rar"})
OPAQUE_ARCHIVE_KINDS = frozenset({"7z", "rar"})  # no reader in the standard library: their members are not seen

# (magic bytes, offset, kind). Mach-O thin and fat headers in both byte orders; a Java class file
# shares 0xCAFEBABE with fat Mach-O and is told apart below.
_MAGIC = (
    (b"\x7fELF", 0, "elf"),
    (b"MZ", 0, "pe"),
    (b"\xfe\xed\xfa\xce", 0, "mach-o"), (b"\xfe\xed\xfa\xcf", 0, "mach-o"),
    (b"\xce\xfa\xed\xfe", 0, "mach-o"), (b"\xcf\xfa\xed\xfe", 0, "mach-o"),
    (b"\xca\xfe\xba\xbe", 0, "mach-o"),
    (b"PK\x03\x04", 0, "zip"), (b"PK\x05\x06", 0, "zip"),
    (b"7z\xbc\xaf\x27\x1c", 0, "7z"),
    (b"Rar!\x1a\x07", 0, "rar"),
    (b"\x1f\x8b", 0, "gzip"), (b"BZh", 0, "bzip2"), (b"\xfd7zXZ\x00", 0, "xz"),
)
# Office documents, Java archives and the like are zips whose members are the program's own; their
# members are listed and scanned like any zip's, but they are not "an archive shipped to be unpacked".
_ZIP_DOCUMENT_EXTS = frozenset({"docx", "xlsx", "pptx", "odt", "ods", "odp", "epub", "jar", "apk", "whl", "vsix", "xpi"})


@dataclass(frozen=True)
class FileContent:
    kind: str = ""  # "" (text or unknown data), or one of EXECUTABLE_KINDS / ARCHIVE_KINDS, or "zip document"
    encrypted: bool = False  # a zip with encrypted members
    members: tuple[str, ...] = ()  # member names of a zip (up to ZIP_MEMBERS_LISTED), executables first
    executable_members: tuple[str, ...] = ()  # members whose first bytes are a compiled program
    scan_texts: tuple[tuple[str, str], ...] = ()  # (path as a finding names it, text) the scan reads
    # A text file too large to read whole: (its line number where the text starts, the text of
    # its last part); scan_texts then holds its first part (skillformat.files.read_oversized_text).
    scan_tail: tuple[int, str] | None = None
    # What the scanner found in the part between, read in blocks and not kept
    # (skillformat.middle); opaque here: the caller's scanner made them.
    part_findings: tuple = ()
    note: str = ""  # how the text was decoded, or why part of it could not be read
    # A pickle (the file, or members of an archive): what loading it imports (skillformat.pickles),
    # dangerous first, and the longest strings it carries, as evidence.
    pickle_imports: tuple[PickleImport, ...] = ()
    pickle_strings: tuple[str, ...] = ()


def kind_of(head: bytes, path: str = "") -> str:
    for magic, offset, kind in _MAGIC:
        if head[offset:offset + len(magic)] == magic:
            if kind == "pe" and not _looks_pe(head):
                return ""
            if kind == "mach-o" and magic == b"\xca\xfe\xba\xbe" and len(head) >= 8 and head[7] >= 30:
                return ""  # a Java class file: the fat-header slot holds a class-file version (>= 45)
            if kind == "zip" and path.rsplit(".", 1)[-1].lower() in _ZIP_DOCUMENT_EXTS:
                return "zip document"
            return kind
    if head[257:262] == b"ustar":
        return "tar"
    # A .pyc starts with two bytes that name the Python version, then "\r\n" (importlib's magic number)
    if path.lower().endswith(".pyc") and head[2:4] == b"\r\n":
        return "python bytecode"
    return ""


def _looks_pe(head: bytes) -> bool:
    # "MZ" starts plenty of text; a PE file points at its "PE\0\0" header from offset 0x3c.
    if len(head) < 0x40:
        return False
    at = int.from_bytes(head[0x3C:0x40], "little")
    return at + 4 <= len(head) and head[at:at + 4] == b"PE\x00\x00"


def inspect_bytes(path: str, data: bytes, *, text_stored: bool, scan_text: TextScanner | None = None) -> FileContent:
    """What `data` (the whole file) holds. `text_stored` says the file is UTF-8 text already kept
    as text, in which case nothing more is needed; a UTF-8 file over the stored-text limit gets its
    text back here for the scan. With `scan_text`, an archive's text members past
    ZIP_MEMBER_BYTES are read on and scanned in blocks (skillformat.middle)."""
    if text_stored:
        return FileContent()
    kind = kind_of(data[:8192], path)
    if kind in ("zip", "zip document"):
        return _zip_content(path, data, kind, scan_text)
    if kind in ("tar", "gzip", "bzip2", "xz"):
        return _tar_content(path, data, kind, scan_text)
    if kind:
        return FileContent(kind=kind)
    if (pickled := inspect_pickle(path, data)) is not None:
        return pickled
    text, note = _as_text(data)
    if text is None:
        return FileContent(note=note)
    return FileContent(scan_texts=((path, text[:SCAN_TEXT_CHARS]),), note=note)


def inspect_pickle(path: str, data: bytes, note: str = "") -> FileContent | None:
    """A pickle's FileContent (kind "pickle", what loading it imports), or None when `data` does
    not start like one and `path` is not named like one. Also for files stored as text: a protocol-0
    pickle is ASCII."""
    if not looks_like_pickle(path, data[:8]):
        return None
    imports, strings = read_pickle(path, data)
    return FileContent(kind="pickle", pickle_imports=imports, pickle_strings=strings, note=note)


def _as_text(data: bytes) -> tuple[str | None, str]:
    """Text a script author could have meant, or (None, why not)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16").lstrip("\ufeff"), "UTF-16 text"
        except UnicodeDecodeError:
            return None, "UTF-16 byte order mark, but not UTF-16 text"
    sample = data[:4096]
    if len(sample) >= 8 and sample.count(0) * 3 >= len(sample) and sample[1::2].count(0) * 10 >= len(sample[1::2]) * 9:
        # UTF-16LE without a byte order mark: a zero after almost every byte of ASCII text.
        try:
            return data[:len(data) // 2 * 2].decode("utf-16-le"), "UTF-16LE text without a byte order mark"
        except UnicodeDecodeError:
            return None, "binary data"
    if b"\0" in sample:
        return None, "binary data"
    try:
        return data.decode("utf-8-sig"), ""  # UTF-8, over the stored-text limit
    except UnicodeDecodeError:
        pass
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in sample)
    if printable * 10 < len(sample) * 8:
        return None, "binary data"
    # Mostly ASCII with bytes that are not UTF-8: a Latin-1 or Windows-1252 file. cp1252 leaves five
    # bytes undefined; "replace" keeps every ASCII command readable whatever they are.
    return data.decode("cp1252", errors="replace"), "not UTF-8; read as Windows-1252"


def inspect_large_archive(path: str, fh: BinaryIO, kind: str, scan_text: TextScanner | None = None) -> FileContent | None:
    """What an archive over the reading limit holds, read from its open file `fh` (seekable): a
    zip's central directory and a plain tar's headers are read in place, and their members as far
    as _read_members reads any archive's; a compressed tarball is unpacked as a stream, up to
    TARBALL_UNPACK_BYTES. None for compressed data that is not a tarball."""
    if kind in ("zip", "zip document"):
        if (too_big := _zip_directory_too_big(fh)) is not None:
            return FileContent(kind=kind, note=too_big)
        fh.seek(0)
        return _zip_content(path, fh, kind, scan_text)
    fh.seek(0)
    if kind == "tar":
        return _tar_content(path, fh, kind, scan_text)
    if kind in _DECOMPRESSORS:
        return _compressed_tarball(path, fh, kind, scan_text)
    return None


_DECOMPRESSORS = {"gzip": lambda fh: gzip.GzipFile(fileobj=fh), "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile}


class _UnpackLimit(OSError):
    pass


class _CappedStream(io.RawIOBase):
    """A decompressing stream that stops with _UnpackLimit after `limit` bytes."""

    def __init__(self, inner, limit: int):
        self.inner, self.limit, self.read_bytes, self.exceeded = inner, limit, 0, False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.read_bytes >= self.limit:
            self.exceeded = True
            raise _UnpackLimit(f"unpacked past {self.limit} bytes")
        data = self.inner.read(min(len(buf), self.limit - self.read_bytes))
        buf[:len(data)] = data
        self.read_bytes += len(data)
        return len(data)


def _compressed_tarball(path: str, fh: BinaryIO, kind: str, scan_text: TextScanner | None) -> FileContent | None:
    """A gzip, bzip2 or xz file over the reading limit, read as a tarball streamed in order (its
    members lie behind everything before them), up to TARBALL_UNPACK_BYTES unpacked. None when it
    is not a tarball: compressed data is then only named."""
    stream = _CappedStream(_DECOMPRESSORS[kind](fh), TARBALL_UNPACK_BYTES)
    try:
        archive = tarfile.open(fileobj=io.BufferedReader(stream, 1 << 16), mode="r|")
    except (tarfile.TarError, OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None

    def members():
        try:
            for info in archive:
                if info.isfile():
                    yield info.name, info.size, lambda info=info: archive.extractfile(info)
        except (tarfile.TarError, OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
            return

    content = _read_members(path, "tar", members(), scan_text=scan_text)
    if not stream.exceeded:
        return content
    cap = f"unpacked up to {TARBALL_UNPACK_BYTES} bytes; the members after not read"
    return replace(content, note=f"{content.note}; {cap}" if content.note else cap)


def _zip_directory_too_big(fh: BinaryIO) -> str | None:
    """Why a large zip's central directory is not parsed, or None. zipfile reads every entry of
    it into memory before any member: a file of a few hundred MB can declare millions, so the
    end record's size is checked first (a Zip64 directory, for over 65,535 entries or 4 GB, is
    not parsed at all)."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - _ZIP_END_SEARCH))
    end = fh.read()
    at = end.rfind(b"PK\x05\x06")
    if at < 0 or len(end) < at + 22:
        return None  # no end record: zipfile says why it cannot open it
    entries = int.from_bytes(end[at + 10:at + 12], "little")
    directory = int.from_bytes(end[at + 12:at + 16], "little")
    if entries == 0xFFFF or directory == 0xFFFFFFFF:
        return "Zip64 archive over the reading limit; members not read"
    if directory > _ZIP_DIRECTORY_BYTES:
        return f"zip directory of {directory} bytes ({entries} members); members not read"
    return None


def _zip_content(path: str, data: bytes | BinaryIO, kind: str, scan_text: TextScanner | None = None) -> FileContent:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data)
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        return FileContent(kind=kind, note=f"zip that cannot be opened: {exc}")

    def members():
        for info in infos:
            if info.is_dir():
                continue
            if info.flag_bits & 0x1:
                yield info.filename, info.file_size, None  # an encrypted member is known only by its name
                continue
            yield info.filename, info.file_size, lambda info=info: archive.open(info)

    return _read_members(path, kind, members(), encrypted=any(i.flag_bits & 0x1 for i in infos), scan_text=scan_text)


def _tar_content(path: str, data: bytes | BinaryIO, kind: str, scan_text: TextScanner | None = None) -> FileContent:
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data) if isinstance(data, bytes) else data, mode="r:*")
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        if kind != "tar":
            return FileContent(kind=kind)  # a compressed file that is not a tarball: nothing to list
        return FileContent(kind=kind, note=f"tar that cannot be opened: {exc}")

    def members():
        # Lazily: listing a whole compressed tarball first would decompress all of it.
        try:
            for info in archive:
                if info.isfile():
                    yield info.name, info.size, lambda info=info: archive.extractfile(info)
        except (tarfile.TarError, OSError, EOFError, ValueError):
            return

    return _read_members(path, "tar", members(), scan_text=scan_text)


def _read_members(path: str, kind: str, members, *, encrypted: bool = False,
                  scan_text: TextScanner | None = None) -> FileContent:
    """Names, compiled programs and scannable texts of an archive's regular members: the first
    _KIND_BYTES of each, and text at most ZIP_MEMBER_BYTES far per member and ZIP_TEXT_BYTES in
    all (the header's size is not trusted). With `scan_text`, a text member longer than that is
    read on and scanned in blocks as it is decompressed, up to MIDDLE_SCAN_BYTES for the whole
    archive: padding compresses to almost nothing, so a padded script costs an attacker no size."""
    names, executables, texts, budget, note = [], [], [], ZIP_TEXT_BYTES, ""
    imports: list[PickleImport] = []
    carried: list[str] = []
    rest_budget, rest_findings, rest_read = MIDDLE_SCAN_BYTES, [], []
    for count, (name, size, opener) in enumerate(members):
        if count >= ZIP_MEMBERS_LISTED:
            note = f"more than {ZIP_MEMBERS_LISTED} members; the first {ZIP_MEMBERS_LISTED} were read"
            break
        names.append(name)
        if opener is None:
            if named_like_program(name):
                executables.append(name)
            continue
        # Every member's first bytes are read, whatever its size: they name a program of any size
        # (a multi-MB stealer is the usual payload). Text is read on, up to ZIP_MEMBER_BYTES of
        # a member while the archive's budget lasts: a payload placed before padding is seen.
        want = max(min(ZIP_MEMBER_BYTES, budget), _KIND_BYTES)
        try:
            with opener() as fh:
                raw = fh.read(want + 1)
                member_kind = kind_of(raw[:_KIND_BYTES], name)
                if member_kind in EXECUTABLE_KINDS or (member_kind == "" and named_like_program(name) and len(raw) > want):
                    executables.append(name)  # a program, or too large to read whole and named like one
                    continue
                if not member_kind and looks_like_pickle(name, raw[:8]):  # a checkpoint's data.pkl
                    whole = raw + fh.read(max(0, PICKLE_BYTES - len(raw)))
                    found, strings = read_pickle(f"{path}!{name}", whole)
                    imports.extend(found)
                    carried.extend(strings)
                    continue
                if member_kind or budget <= 0:
                    continue  # an archive inside an archive is listed, not opened
                whole = raw
                if len(raw) > want:  # cut short: end on a whole line, so on a whole character
                    raw = raw[:want]
                    raw = raw[:raw.rfind(b"\n") + 1] or raw
                text, decoded_as = _as_text(raw)
                if text is not None and not decoded_as and len(whole) > want and scan_text is not None and rest_budget <= 0:
                    rest_read.append(f"{name} (the rest not read: the archive's {MIDDLE_SCAN_BYTES} bytes are spent)")
                elif text is not None and not decoded_as and len(whole) > want and scan_text is not None:
                    rest, stopped = _scan_rest(f"{path}!{name}", fh, whole, len(raw), text[:_KIND_BYTES], scan_text,
                                               rest_budget)
                    rest_budget -= rest.scanned
                    rest_findings.extend(rest.findings)
                    rest_read.append(f"{name} ({rest.note('after', rest_unknown=stopped == 'budget')}"
                                     f"{'' if stopped == 'budget' else stopped})")
        except (zipfile.BadZipFile, tarfile.TarError, OSError, ValueError, EOFError, NotImplementedError,
                RuntimeError, AttributeError, zlib.error) as exc:
            note = f"member {name} cannot be read: {exc}"
            continue
        budget -= len(raw)
        if text is not None:
            texts.append((f"{path}!{name}", text[:SCAN_TEXT_CHARS]))
    names.sort(key=lambda n: (n not in executables, n))
    if rest_read:
        read = f"past the first {ZIP_MEMBER_BYTES} bytes of " + "; ".join(rest_read)
        note = f"{note}; {read}" if note else read
    imports.sort(key=lambda i: not i.dangerous)
    return FileContent(kind=kind, encrypted=encrypted, members=tuple(names), executable_members=tuple(executables),
                       scan_texts=tuple(texts), part_findings=tuple(rest_findings), note=note,
                       pickle_imports=tuple(imports), pickle_strings=tuple(carried[:3]))


def _scan_rest(where: str, fh: BinaryIO, start: bytes, begin: int, head: str, scan_text: TextScanner,
               budget: int) -> tuple[MiddleScan, str]:
    """The rest of a text member from `begin` (what was read of it is `start`), scanned in blocks
    as `fh` is read on, until its end or `budget` bytes; and why reading stopped early, if it did:
    "budget", or the error (a damaged stream or a bad CRC at the end loses none of what was read
    before it)."""
    rest = MiddleScan(where, scan_text, begin=begin, head=head, budget=budget)
    rest.feed(start)
    stopped = ""
    try:
        while not rest.exhausted and (chunk := fh.read(1 << 20)):
            rest.feed(chunk)
        if rest.exhausted:
            stopped = "budget"
    except (zipfile.BadZipFile, tarfile.TarError, OSError, ValueError, EOFError, RuntimeError, zlib.error) as exc:
        stopped = f"; reading stopped: {exc}"
    rest.finish()
    return rest, stopped


_PROGRAM_EXTS = frozenset({"exe", "dll", "scr", "com", "msi", "pif", "app", "dylib", "so", "bin", "elf", "dmg", "pkg"})
_SCRIPT_EXTS = frozenset({"bat", "cmd", "ps1", "vbs", "js", "jar", "command", "sh"})


def named_like_program(name: str, *, scripts: bool = False) -> bool:
    """The member or file name ends like a compiled program (.exe, .dll, .dmg ...), or with
    `scripts` also like a script a user would run (.ps1, .bat, .sh ...): all that is known of a
    member too large to read or inside a password-protected archive."""
    base = name.rsplit("/", 1)[-1].lower()
    ext = base.rsplit(".", 1)[-1] if "." in base else ""
    return ext in _PROGRAM_EXTS or scripts and ext in _SCRIPT_EXTS
