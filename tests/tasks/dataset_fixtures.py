"""Real-shaped task collections written by the tests themselves (issue 17): Harbor tasks with binary
files (a WAV, a PNG, a Parquet file, a PDF, an "encrypted" blob of random bytes), odd task.toml text
and modes, tasks without solve.sh, Terminal-Bench 1 tasks in the shapes of its SWE-bench,
LiveCodeBench and compose-based adapters, and datasets of per-task zips. Also used by
bench/import_datasets.py."""
from __future__ import annotations

import io
import os
import random
import struct
import wave
import zipfile
import zlib
from pathlib import Path

from tests.lib.harbor_samples import TB1_COMPOSE as _TB1_CLIENT_COMPOSE


def wav_bytes(seconds: float = 0.05, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", (i * 97) % 2000 - 1000) for i in range(int(rate * seconds))))
    return buf.getvalue()


def png_bytes(width: int = 4, height: int = 3) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"".join(bytes((x * 60 % 256, y * 80 % 256, 200)) for x in range(width))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def parquet_bytes() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [1, 2, 3], "label": ["a", "b", "c"]}), buf)
    return buf.getvalue()


def pdf_bytes() -> bytes:
    return (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>"
            b"endobj\n3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 72 72]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n")


def encrypted_blob(seed: int = 7, size: int = 512) -> bytes:
    """Stands in for an encrypted oracle file: bytes with no structure at all."""
    return random.Random(seed).randbytes(size)


# task.toml as people write it: comments, their own key order, integers, memory_mb, no tags.
ODD_TOML = """# A task from a multimedia collection.
version = "1.0"

[metadata]
difficulty = "medium"   # kept as written
author_name = "someone"

[verifier]
timeout_sec = 600

[agent]
timeout_sec = 1200

[environment]
memory_mb = 2048
cpus = 2
build_timeout_sec = 600
"""

TEST_SH = b"#!/bin/bash\nif [ -s /app/out.wav ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


def write(root: Path, files: dict[str, bytes], modes: dict[str, int] | None = None) -> Path:
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, (modes or {}).get(rel, 0o755 if rel.endswith(".sh") else 0o644))
    return root


def multimedia_task(root: Path, *, n: int = 0, solution: bool = True) -> Path:
    """A Harbor task with audio, image, Parquet, PDF and encrypted files, odd modes and an empty
    directory, and (without `solution`) no solution/ at all."""
    files = {
        "task.toml": ODD_TOML.encode(),
        "instruction.md": f"Convert /app/in.wav to /app/out.wav (task {n}).\n".encode(),
        "environment/Dockerfile": b"FROM python:3.11-slim\nWORKDIR /app\nCOPY in.wav cover.png /app/\n",
        "environment/in.wav": wav_bytes(),
        "environment/cover.png": png_bytes(),
        "environment/data/table.parquet": parquet_bytes(),
        "environment/docs/spec.pdf": pdf_bytes(),
        "environment/run.sh": b"#!/bin/sh\necho not executable on purpose\n",
        "tests/test.sh": TEST_SH,
        "tests/oracle.enc": encrypted_blob(n),
        "tests/check.py": b"print('executable python')\n",
    }
    if solution:
        files["solution/solve.sh"] = b"#!/bin/bash\ncp /app/in.wav /app/out.wav\n"
    write(root, files, modes={"environment/run.sh": 0o644, "tests/check.py": 0o755, "tests/oracle.enc": 0o600})
    (root / "environment" / "cache").mkdir()
    return root


TB1_SWEBENCH_RUN_TESTS = """#!/bin/bash
set -uo pipefail
cd /testbed
pytest -rA tests/test_fix.py > test_output.log 2>&1 || true
cat > parser.py <<'EOF'
import sys
log = open("test_output.log").read()
print("SWEBench results starts here")
print("PASSED" if "FAILED" not in log and "passed" in log else "FAILED")
print("SWEBench results ends here")
EOF
python3 parser.py
# the adapter's parser step always exits 0
exit 0
"""


def tb1_task(root: Path, *, parser: str = "pytest", run_tests: str | None = None, dockerfile: str | None = None,
             compose: str | None = None, solution: bool = True, extra: dict[str, bytes] | None = None) -> Path:
    yaml = (f"instruction: |\n  Fix the bug in /testbed.\nparser_name: {parser}\ndifficulty: hard\n"
            "max_agent_timeout_sec: 900\nmax_test_timeout_sec: 120\n")
    files = {"task.yaml": yaml.encode(),
             "run-tests.sh": (run_tests or "#!/bin/bash\npytest -rA $TEST_DIR/test_outputs.py\n").encode(),
             "tests/test_outputs.py": b"def test_ok():\n    assert True\n"}
    if dockerfile is not None:
        files["Dockerfile"] = dockerfile.encode()
    if compose is not None:
        files["docker-compose.yaml"] = compose.encode()
    if solution:
        files["solution.sh"] = b"#!/bin/bash\necho fixed\n"
    files.update(extra or {})
    return write(root, files)


def swebench_task(root: Path) -> Path:
    return tb1_task(root, parser="swebench", run_tests=TB1_SWEBENCH_RUN_TESTS,
                    dockerfile="FROM ubuntu:24.04\nWORKDIR /testbed\n")


# LiveCodeBench-Pro's adapter copies the files TB1 left in the build context into the image.
LIVECODEBENCH_DOCKERFILE = """FROM python:3.11-slim
WORKDIR /app
COPY problem.txt /app/problem.txt
COPY run-tests.sh /app/run-tests.sh
COPY solution.sh /app/solution.sh
COPY tests/ /app/tests/
"""


def livecodebench_task(root: Path) -> Path:
    return tb1_task(root, dockerfile=LIVECODEBENCH_DOCKERFILE, extra={"problem.txt": b"Sum two numbers.\n"})


# TB1's client service (as tests/lib/harbor_samples.py has it) with a sidecar
TB1_COMPOSE = _TB1_CLIENT_COMPOSE + "  redis:\n    image: redis:7\n"


def compose_task(root: Path) -> Path:
    return tb1_task(root, dockerfile="FROM ubuntu:24.04\n", compose=TB1_COMPOSE)


def zip_dir(src: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w") as z:
        for path in sorted(src.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo(f"{src.name}/{path.relative_to(src).as_posix()}")
                info.external_attr = (os.stat(path).st_mode & 0o777) << 16
                z.writestr(info, path.read_bytes())
    return target


def facet_made_task(name: str = "portable", *, status: str = "validated"):
    """A task as construction leaves it (DB rows): FROM facet-base:bookworm, solve.sh writes ok."""
    from facet_site.lib import harbor
    from tasks import versions
    from tasks.models import Task

    task = Task.objects.create(name=name, status=status, step="done")
    files = {"instruction.md": "Write ok to /app/out.txt.\n", "task.toml": harbor.canonical_task_toml(harbor.TaskConfig()),
             "environment/Dockerfile": "FROM facet-base:bookworm\nWORKDIR /app\n",
             "tests/test.sh": "#!/bin/bash\nif grep -qx ok /app/out.txt; then echo 1; else echo 0; fi "
                              "> /logs/verifier/reward.txt\n",
             "solution/solve.sh": "#!/bin/bash\necho ok > /app/out.txt\n"}
    version = versions.create_version(task, files)
    Task.objects.filter(pk=task.pk).update(current_version=version)
    return task, version
