"""The Docker engine as facet uses it, Django-free: base image, environment builds, sandboxes.

facet runs untrusted generated code (solutions, verifiers) here, so everything that touches a
container applies limits by default. The engine is reached through the Docker SDK for Python; the
caller names it (settings.DOCKER_HOST; DOCKER_TLS_VERIFY / DOCKER_CERT_PATH still apply).
docs/docker.md says how the engine is started on our machines and which limits hold on which
storage driver.

One module per concern: `errors` (the transient/permanent split the jobs need), `client`
(connecting, engine facts, image look-ups), `base_image`, `dockerfile_lint`, `builds`
(environment images), `sandbox` (containers for untrusted code), `leftovers` (their cleanup),
`snapshots` (a sandbox's realized state), `previews` (structure-aware previews of its files and
the installed tool versions, for the construction prompts), `capture` (bounded output), `constants` and `cli`
(`python -m facet_site.lib.docker_engine base-image|cleanup|info`). The names below are what
the apps use as `docker_engine.X`.
"""
from facet_site.lib.docker_engine.base_image import (
    BASE_PACKAGES, DEBIAN_MIRROR, DEBIAN_SUITE, build_base_image, ensure_base_image,
)
from facet_site.lib.docker_engine.builds import BuildResult, build_image
from facet_site.lib.docker_engine.client import (
    DEFAULT_ENGINE_URL, connect, engine_info, engine_url, find_image,
)
from facet_site.lib.docker_engine.constants import (
    BASE_IMAGE_TAG, ENV_IMAGE_REPOSITORY, LABEL_BASE, LABEL_BASE_PACKAGES, LABEL_CONTEXT_SHA256,
    LABEL_CREATED, LABEL_OWNER, LABEL_SANDBOX, GiB, KiB, MiB,
)
from facet_site.lib.docker_engine.dockerfile_lint import lint_dockerfile
from facet_site.lib.docker_engine.errors import (
    BaseImageBuildFailed, BaseImageMissing, BuildFailed, BuildTimeout, DockerEngineError,
    DockerfileLintError, EngineUnavailable, PermanentEngineError, SandboxGone,
    TransientEngineError, classify_error,
)
from facet_site.lib.docker_engine.leftovers import cleanup_leftovers
from facet_site.lib.docker_engine.previews import (
    MACHINERY_DIRS, TOOL_VERSIONS_COMMAND, in_machinery, parse_tool_versions, preview_file, render_preview, render_tools,
)
from facet_site.lib.docker_engine.sandbox import SANDBOX_CAPABILITIES, ExecResult, Sandbox, SandboxLimits
from facet_site.lib.docker_engine.snapshots import (
    FileEntry, ProcessEntry, Snapshot, SnapshotDiff, diff_snapshots,
)

__all__ = [
    "BASE_IMAGE_TAG", "BASE_PACKAGES", "DEBIAN_MIRROR", "DEBIAN_SUITE", "DEFAULT_ENGINE_URL",
    "ENV_IMAGE_REPOSITORY", "LABEL_BASE", "LABEL_BASE_PACKAGES", "LABEL_CONTEXT_SHA256",
    "LABEL_CREATED", "LABEL_OWNER", "LABEL_SANDBOX", "SANDBOX_CAPABILITIES", "GiB", "KiB", "MiB",
    "BaseImageBuildFailed", "BaseImageMissing", "BuildFailed", "BuildTimeout", "DockerEngineError",
    "DockerfileLintError", "EngineUnavailable", "PermanentEngineError", "SandboxGone",
    "TransientEngineError", "classify_error",
    "connect", "engine_info", "engine_url", "find_image",
    "build_base_image", "ensure_base_image", "lint_dockerfile", "BuildResult", "build_image",
    "ExecResult", "Sandbox", "SandboxLimits", "cleanup_leftovers",
    "FileEntry", "ProcessEntry", "Snapshot", "SnapshotDiff", "diff_snapshots",
    "MACHINERY_DIRS", "TOOL_VERSIONS_COMMAND", "in_machinery", "parse_tool_versions", "preview_file", "render_preview",
    "render_tools",
]
