"""`python -m facet_site.lib.docker_engine base-image|cleanup|info`: the engine commands without
Django (scripts/build-base-image runs the first).

This command line is a program of its own, started without Django, so like settings.py for the
site it reads its defaults from its environment (DOCKER_HOST, FACET_DATA_DIR) here and hands them
to the library as arguments.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from facet_site.lib.docker_engine.base_image import ensure_base_image
from facet_site.lib.docker_engine.client import connect, engine_info
from facet_site.lib.docker_engine.constants import BASE_IMAGE_TAG
from facet_site.lib.docker_engine.errors import DockerEngineError, TransientEngineError
from facet_site.lib.docker_engine.leftovers import cleanup_leftovers

# settings.DATA_DIR's default, for a checkout run without FACET_DATA_DIR.
_REPO_VAR = Path(__file__).resolve().parents[3] / "var"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m facet_site.lib.docker_engine",
                                     description="The Docker engine as facet uses it: base image, "
                                     "environment builds, sandboxes.")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST") or None,
                        help="engine URL (default: DOCKER_HOST or local socket)")
    parser.add_argument("--data-dir", type=Path,
                        default=Path(os.environ.get("FACET_DATA_DIR") or _REPO_VAR),
                        help="where the base image's lock, log and work directory go "
                             "(default: FACET_DATA_DIR or var/)")
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("base-image", help=f"build the base image ({BASE_IMAGE_TAG}) if missing")
    base.add_argument("--tag", default=BASE_IMAGE_TAG)
    base.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    base.add_argument("--rootfs-dir", type=Path, help="work directory for debootstrap")
    clean = sub.add_parser("cleanup", help="remove leftover sandbox containers")
    clean.add_argument("--older-than", type=float, default=0, metavar="SECONDS")
    clean.add_argument("--owner")
    sub.add_parser("info", help="print what the engine supports, as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        client = connect(args.docker_host)
        if args.command == "base-image":
            started = time.monotonic()
            image = ensure_base_image(client, args.tag, data_dir=args.data_dir,
                                      rootfs_dir=args.rootfs_dir, force=args.force)
            print(json.dumps({"tag": args.tag, "id": image.id,
                              "size_bytes": image.attrs.get("Size"),
                              "seconds": round(time.monotonic() - started, 1)}))
        elif args.command == "cleanup":
            print(cleanup_leftovers(client, args.older_than, owner=args.owner))
        elif args.command == "info":
            print(json.dumps(engine_info(client), indent=2))
    except DockerEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 75 if isinstance(exc, TransientEngineError) else 1  # 75: EX_TEMPFAIL
    return 0

