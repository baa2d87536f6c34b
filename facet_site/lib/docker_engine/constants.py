"""Names and sizes the engine modules share: byte units, facet's image tags and the labels it puts
on the images and containers it creates (how leftovers are found again)."""
from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

BASE_IMAGE_TAG = "facet-base:bookworm"
ENV_IMAGE_REPOSITORY = "facet-env"

LABEL_BASE = "facet.base"
LABEL_BASE_PACKAGES = "facet.base.packages"
LABEL_CONTEXT_SHA256 = "facet.context.sha256"
LABEL_SANDBOX = "facet.sandbox"
LABEL_OWNER = "facet.owner"
LABEL_CREATED = "facet.created"

# The PID 1 of every sandbox: a shell that sleeps and, being init, reaps the orphans that
# untrusted code leaves behind (a bare `sleep infinity` as PID 1 never reaps, so zombies from a
# killed fork bomb would hold the pids limit forever). `kill -9 -1` from an exec spares PID 1,
# kills the sleep, and the loop starts a new one, so the sandbox survives a straggler cleanup.
# Snapshots know it too, to leave it out of a task's processes.
SANDBOX_INIT = "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done"
