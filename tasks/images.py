"""Which image a task version builds FROM, and whether this machine has it: an imported task's
Dockerfile names a public image (python:3.11-slim, ubuntu:24.04) that no registry will deliver
here. The image is used when the engine has it (`facet images load`), or the local image it is
mapped to (settings.FACET_IMAGE_MAP, then the import's own map); otherwise the validation waits
for its image instead of failing the task."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from facet_site.lib import docker_engine as de
from facet_site.lib.harbor.portable import first_from

from . import jobs
from .apps import base_image
from .models import Task, TaskImport, TaskStatus, TaskVersion, Validation, ValidationStatus


@dataclass
class ImageNeed:
    wanted: str  # the image the task names
    local: str  # the image the build starts from here
    missing: bool  # neither the image nor its mapping is on this machine

    @property
    def reason(self) -> str:
        return waiting_reason(self.wanted, self.local)


def waiting_reason(wanted: str, local: str) -> str:
    mapped = f" (mapped to {local})" if local != wanted else ""
    return (f"waiting for its image: {wanted}{mapped} is not on this machine and no registry is reachable. "
            f"Provide it with `facet images load FILE.tar` (a `docker save {wanted}` archive, .tar or .tar.gz), "
            f"or map it to a local image: FACET_IMAGE_MAP='{{\"{wanted}\": \"{base_image()}\"}}' "
            "or the import's --image-map; the validation runs once the image is there")


def task_image(version: TaskVersion) -> str | None:
    """The image the version's environment starts FROM (its first FROM; or task.toml's docker_image)."""
    dockerfile = version.files.get("environment/Dockerfile")
    if dockerfile is not None:
        image = first_from(dockerfile)
        return image if image and "$" not in image else None
    m = re.search(r'(?m)^\s*docker_image\s*=\s*"([^"]+)"', version.files.get("task.toml", ""))
    return m.group(1) if m else None


def image_map(version: TaskVersion) -> dict[str, str]:
    # facet's own exports start from the public twin of its base image (tasks.exports.portable_bundle)
    merged = {settings.FACET_EXPORT_BASE_IMAGE: base_image(), **settings.FACET_IMAGE_MAP}
    for own in TaskImport.objects.filter(tasks=version.task_id).order_by("id").values_list("image_map", flat=True):
        merged.update(own or {})
    return merged


def image_need(version: TaskVersion, client) -> ImageNeed | None:
    """None for a task on facet's own base image (the usual path); else what it needs here."""
    wanted = task_image(version)
    if not wanted or wanted == base_image():
        return None
    local = image_map(version).get(wanted, wanted)
    return ImageNeed(wanted=wanted, local=local, missing=de.find_image(client, local) is None)


def retarget(task_dir: Path, need: ImageNeed) -> None:
    """Point the written task's Dockerfile at the local stand-in (the version itself is untouched)."""
    if need.local == need.wanted:
        return
    dockerfile = Path(task_dir) / "environment" / "Dockerfile"
    if dockerfile.is_file():
        text = dockerfile.read_text(encoding="utf-8")
        dockerfile.write_text(re.sub(rf"(?im)^(\s*FROM\s+(?:--platform=\S+\s+)?){re.escape(need.wanted)}(?=\s|$)",
                                     lambda m: m.group(1) + need.local, text), encoding="utf-8")


def resume_waiting_for_images(client) -> list[int]:
    """Validations that waited for an image now on this machine go back to the Docker queue."""
    resumed = []
    for validation in Validation.objects.filter(status=ValidationStatus.WAITING_FOR_IMAGE).select_related("version"):
        need = image_need(validation.version, client)
        if need is None or not need.missing:
            if Validation.objects.filter(pk=validation.pk, status=ValidationStatus.WAITING_FOR_IMAGE).update(
                    status=ValidationStatus.QUEUED, reason=""):
                Task.objects.filter(pk=validation.version.task_id, status=TaskStatus.WAITING_FOR_IMAGE).update(
                    status=TaskStatus.VALIDATING, message="")
                jobs.docker_validate.delay_on_commit(validation.pk)
                resumed.append(validation.pk)
    return resumed
