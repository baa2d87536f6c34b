"""Binary task files: storing their bytes once (TaskBlob, content-addressed; large ones under
DATA_DIR/blobs/) and reading them back for exports, validations and the task page's downloads."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from facet_site.lib.harbor.binary import BlobStore, media_type, sha256_hex

from .models import TaskBlob


def _store() -> BlobStore:
    return BlobStore(Path(settings.DATA_DIR) / "blobs")


def put_blobs(binary: dict[str, bytes]) -> dict[str, str]:
    """Store each file's bytes (once, however many tasks hold them) and return path -> sha256;
    the path only informs the media type. Two queries whatever the number of files."""
    refs = {path: sha256_hex(data) for path, data in binary.items()}
    if not refs:
        return refs
    known = set(TaskBlob.objects.filter(sha256__in=set(refs.values())).values_list("sha256", flat=True))
    new: dict[str, TaskBlob] = {}
    for path, data in sorted(binary.items()):
        digest = refs[path]
        if digest in known or digest in new:
            continue
        inline = len(data) <= settings.FACET_BLOB_INLINE_BYTES
        if not inline:
            _store().put(data)  # on disk before the row that points at it
        new[digest] = TaskBlob(sha256=digest, size=len(data), media_type=media_type(path, data)[:100],
                               data=data if inline else None)
    # a concurrent import storing the same bytes is no conflict: the row means the same either way
    TaskBlob.objects.bulk_create(new.values(), ignore_conflicts=True)
    return refs


def blob_bytes(digest: str) -> bytes:
    blob = TaskBlob.objects.get(sha256=digest)
    if blob.data is not None:
        return bytes(blob.data)
    return _store().get(digest)


def blob_head(blob: TaskBlob, size: int = 4096) -> bytes:
    """The first bytes of a blob (for a peek), without reading a large one whole."""
    if blob.data is not None:
        return bytes(blob.data[:size])
    with open(_store().path(blob.sha256), "rb") as fh:
        return fh.read(size)


def blobs_of(paths: dict[str, str]) -> dict[str, bytes]:
    """path -> sha256 as path -> bytes (one query for the rows, disk for the large ones)."""
    if not paths:
        return {}
    rows = {b.sha256: b for b in TaskBlob.objects.filter(sha256__in=set(paths.values()))}
    store = _store()
    out = {}
    for path, digest in paths.items():
        row = rows.get(digest)
        if row is None:
            raise TaskBlob.DoesNotExist(f"{path}: its bytes (blob {digest}) are missing from the database")
        out[path] = bytes(row.data) if row.data is not None else store.get(digest)
    return out
