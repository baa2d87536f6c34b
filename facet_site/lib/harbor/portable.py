"""Exported tasks that build on any machine with a registry: a Dockerfile starting FROM facet's local
base image (debootstrapped here, never pushed) is rewritten to start from a pinned public Debian
bookworm image and install the same packages, with apt pinned to the snapshot of the same date.
Django-free; the caller passes the local image name, the public one and the package list.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# The public image a rewritten task starts from, pinned by its dated tag (Docker Hub's debian
# images are re-tagged per point release; "bookworm-YYYYMMDD-slim" never moves), and the apt
# snapshot of the same day, so the packages installed are the ones of that date too.
DEFAULT_PUBLIC_BASE = "debian:bookworm-20250113-slim"
DEFAULT_APT_SNAPSHOT = "20250113T000000Z"

_FROM = re.compile(r"^(\s*FROM\s+)(?:--platform=\S+\s+)?(\S+)(.*)$", re.I)


@dataclass
class PortableDockerfile:
    text: str
    base_image: str  # the image the (possibly rewritten) Dockerfile starts FROM
    rewritten: bool


def first_from(dockerfile: str) -> str | None:
    for line in dockerfile.splitlines():
        m = _FROM.match(line)
        if m:
            return m.group(2)
    return None


def portable_dockerfile(dockerfile: str, *, local_base: str, packages: tuple[str, ...] | list[str],
                        public_base: str = DEFAULT_PUBLIC_BASE, apt_snapshot: str = DEFAULT_APT_SNAPSHOT
                        ) -> PortableDockerfile:
    """Rewrite every `FROM <local_base>` to the public base plus one RUN that installs `packages`
    from the Debian snapshot of `apt_snapshot`. The RUN installs only when a package is missing, so
    the same Dockerfile also builds offline from a local copy of the public image that already has
    them (how facet verifies the rewrite). Other Dockerfiles come back unchanged."""
    out: list[str] = []
    rewritten = False
    for line in dockerfile.split("\n"):
        m = _FROM.match(line)
        if not m or m.group(2) != local_base:
            out.append(line)
            continue
        rewritten = True
        pkgs = " ".join(packages)
        snapshot = f"http://snapshot.debian.org/archive/debian/{apt_snapshot}"
        security = f"http://snapshot.debian.org/archive/debian-security/{apt_snapshot}"
        out += [
            f"# facet: {local_base} exists only on the machine that made this task; the same Debian bookworm",
            f"# with the same packages, pinned to {public_base} and the apt snapshot {apt_snapshot}.",
            f"{m.group(1)}{public_base}{m.group(3)}",
            "RUN if ! dpkg -s " + pkgs + " >/dev/null 2>&1; then \\",
            f"      printf 'deb [check-valid-until=no] {snapshot} bookworm main\\n"
            f"deb [check-valid-until=no] {snapshot} bookworm-updates main\\n"
            f"deb [check-valid-until=no] {security} bookworm-security main\\n' > /etc/apt/sources.list \\",
            "      && rm -f /etc/apt/sources.list.d/debian.sources \\",
            "      && apt-get update \\",
            "      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + pkgs + " \\",
            "      && rm -rf /var/lib/apt/lists/*; \\",
            "    fi \\",
            "    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED",
        ]
    text = "\n".join(out)
    return PortableDockerfile(text=text, base_image=first_from(text) or "", rewritten=rewritten)


def restore_local(dockerfile: str, *, local_base: str, packages: tuple[str, ...] | list[str],
                  public_base: str = DEFAULT_PUBLIC_BASE, apt_snapshot: str = DEFAULT_APT_SNAPSHOT) -> str:
    """The inverse of `portable_dockerfile` for a facet export coming back: every block it wrote
    (recognised only when regenerating it gives the same lines) becomes `FROM <local_base>` again,
    so a re-imported export has the content hash of the version it was made from."""
    lines = dockerfile.split("\n")
    marker = f"# facet: {local_base} exists only on the machine that made this task"
    i = 0
    while i < len(lines):
        if lines[i].startswith(marker) and i + 2 < len(lines):
            m = _FROM.match(lines[i + 2])
            if m and m.group(2) == public_base:
                original = f"{m.group(1)}{local_base}{m.group(3)}"
                block = portable_dockerfile(original, local_base=local_base, packages=packages,
                                            public_base=public_base, apt_snapshot=apt_snapshot).text.split("\n")
                if lines[i:i + len(block)] == block:
                    lines[i:i + len(block)] = [original]
        i += 1
    return "\n".join(lines)
