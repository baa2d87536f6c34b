"""Images without a registry: loading `docker save` archives (.tar, .tar.gz/.tgz) into the engine and
listing what it holds, so imported tasks that start FROM public images validate offline.
Django-free."""
from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

import docker

from facet_site.lib.docker_engine.errors import PermanentEngineError, engine_call


class ImageArchiveError(PermanentEngineError):
    """A file that is not a `docker save` archive, or one the engine refused."""


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def archive_tags(path: Path) -> list[str]:
    """The image names a `docker save` archive carries (its manifest.json RepoTags), read
    without loading it; raises ImageArchiveError when it is not such an archive."""
    import json

    try:
        opener = gzip.open if _is_gzip(path) else open
        with opener(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            for member in tar:
                if member.name in ("manifest.json", "./manifest.json") and member.isfile():
                    data = json.loads(tar.extractfile(member).read())
                    return sorted({t for entry in data for t in (entry.get("RepoTags") or [])})
    except (OSError, tarfile.TarError, ValueError, EOFError) as exc:
        raise ImageArchiveError(f"{path.name}: not a docker save archive ({exc})") from None
    raise ImageArchiveError(f"{path.name}: not a docker save archive (no manifest.json; make it with "
                            "`docker save IMAGE -o FILE.tar`)")


def load_image_archive(client: docker.DockerClient, path: Path) -> list[str]:
    """Load a `docker save` archive (plain or gzip-compressed) into the engine; returns the image
    names it brought. Streams the file: a multi-gigabyte archive is never held in memory."""
    path = Path(path)
    if not path.is_file():
        raise ImageArchiveError(f"{path}: no such file")
    tags = archive_tags(path)
    opener = gzip.open if _is_gzip(path) else open

    def chunks():
        with opener(path, "rb") as fh:
            while block := fh.read(1 << 20):
                yield block

    with engine_call(f"load {path.name}"):
        events = list(client.api.load_image(chunks(), quiet=True))
    errors = [str(e.get("error") or e.get("errorDetail")) for e in events if isinstance(e, dict)
              and (e.get("error") or e.get("errorDetail"))]
    if errors:
        raise ImageArchiveError(f"{path.name}: the engine refused the archive: {'; '.join(errors)[:500]}")
    return tags


def list_images(client: docker.DockerClient) -> list[dict]:
    """Every tagged image the engine holds: name, id, size, created."""
    with engine_call("list images"):
        images = client.images.list()
    rows = []
    for image in images:
        for tag in image.tags:
            rows.append({"name": tag, "id": image.short_id.removeprefix("sha256:"),
                         "size": image.attrs.get("Size", 0), "created": image.attrs.get("Created", "")})
    return sorted(rows, key=lambda r: r["name"])
