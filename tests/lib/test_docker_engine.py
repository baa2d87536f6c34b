"""The Docker engine adapter against a real engine: builds, limits, files, state snapshots.

Without an engine these tests skip, unless FACET_REQUIRE_DOCKER=1 (CI), where they fail. The base
image is built once (1-3 minutes) if the engine lacks it.
"""
from __future__ import annotations

import os
import resource
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests
from django.conf import settings
from docker.errors import APIError, ImageNotFound, NotFound

from facet_site.lib import docker_engine as de

pytestmark = pytest.mark.docker

OWNER = f"pytest:{socket.gethostname()}:{os.getpid()}"
SMALL = de.SandboxLimits(cpus=1.0, memory_bytes=256 * de.MiB, pids=64, disk_bytes=256 * de.MiB,
                         tmp_bytes=32 * de.MiB, output_bytes=64 * de.KiB, disk_poll_s=0.5)


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def _remove_leftovers():
    """Whatever this module's sandboxes left behind goes, even after a failed test."""
    yield
    try:
        engine = de.connect(settings.DOCKER_HOST)
    except de.EngineUnavailable:
        return
    de.cleanup_leftovers(engine, owner=OWNER)
    engine.close()


def _write_context(directory: Path, dockerfile: str, files: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {}).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory


@pytest.fixture(scope="session")
def env_image(client, base_image, tmp_path_factory):
    context = _write_context(
        tmp_path_factory.mktemp("env"),
        f"FROM {base_image}\nWORKDIR /app\nCOPY data.txt /app/data.txt\n"
        "RUN echo 'print(1)' > /app/main.py\n",
        {"data.txt": "line one\n"},
    )
    return de.build_image(client, context, base_image=base_image, timeout_s=300).image_tag


@pytest.fixture
def sandbox(client, env_image):
    with de.Sandbox(client, env_image, owner=OWNER, limits=SMALL) as sb:
        yield sb


def _container_exists(client, container_id: str) -> bool:
    try:
        client.api.inspect_container(container_id)
        return True
    except NotFound:
        return False


# ---------------------------------------------------------------------------- errors, connect


def test_connect_names_the_unreachable_engine():
    with pytest.raises(de.EngineUnavailable) as info:
        de.connect("unix:///nonexistent/docker.sock")
    assert str(info.value) == (
        "Docker engine not reachable at unix:///nonexistent/docker.sock; see README (Docker)")
    assert isinstance(info.value, de.TransientEngineError)


def test_the_engine_is_the_one_named_not_the_environments(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/from-the-environment.sock")
    assert de.engine_url(None) == de.engine_url("") == "unix:///var/run/docker.sock"
    assert de.engine_url("tcp://engine.example:2375") == "tcp://engine.example:2375"
    with pytest.raises(de.EngineUnavailable) as info:
        de.connect("unix:///nonexistent/named.sock")
    assert info.value.url == "unix:///nonexistent/named.sock"


def test_the_base_image_lock_lives_in_the_data_dir_it_is_given(tmp_path):
    class Images:
        """Missing at the first look, there at the second: another worker built it meanwhile."""
        looks = 0

        def get(self, ref):
            self.looks += 1
            if self.looks == 1:
                raise ImageNotFound(ref)
            return f"image {ref}"

    client = type("Client", (), {"images": Images()})()
    data_dir = tmp_path / "data"
    assert de.ensure_base_image(client, "facet-base:test", data_dir=data_dir) == (
        "image facet-base:test")
    assert (data_dir / "base-image.lock").is_file()
    with pytest.raises(TypeError):
        de.ensure_base_image(client, "facet-base:test")  # no data_dir: no hidden default


def test_errors_split_into_transient_and_permanent():
    def api_error(status: int, explanation: str) -> APIError:
        response = requests.Response()
        response.status_code = status
        return APIError(f"{status}", response=response, explanation=explanation)

    assert isinstance(de.classify_error(api_error(503, "engine is restarting")),
                      de.TransientEngineError)
    assert isinstance(de.classify_error(api_error(500, "something broke")), de.TransientEngineError)
    assert isinstance(de.classify_error(requests.exceptions.ConnectionError("reset")),
                      de.TransientEngineError)
    assert isinstance(de.classify_error(api_error(400, "bad parameter")), de.PermanentEngineError)
    assert isinstance(de.classify_error(api_error(500, "OCI runtime create failed: executable "
                                                       "file not found")), de.PermanentEngineError)
    assert isinstance(de.BuildFailed("x"), de.PermanentEngineError)


# ---------------------------------------------------------------------------- lint


BASE = de.BASE_IMAGE_TAG


def test_lint_accepts_a_plain_dockerfile():
    text = f"""# escape=\\
FROM {BASE}
ARG GITHUB_TOKEN
ENV APP_HOME=/app PATH=/app/bin:$PATH
ENV API_KEY=${{API_KEY}}
WORKDIR /app
COPY app/ /app/
RUN apt-get update && \\
    apt-get install -y --no-install-recommends cowsay
"""
    assert de.lint_dockerfile(text, BASE) == []


def test_lint_requires_the_base_image_in_every_stage():
    problems = de.lint_dockerfile("FROM python:3.12-slim\nRUN true\n", BASE)
    assert len(problems) == 1 and "line 1" in problems[0] and BASE in problems[0]
    multi = f"FROM {BASE} AS build\nRUN make\nFROM build\nFROM debian:bookworm\n"
    problems = de.lint_dockerfile(multi, BASE)
    assert len(problems) == 1 and problems[0].startswith("line 4")
    assert de.lint_dockerfile("ARG IMG=x\nFROM $IMG\n", BASE)[0].startswith("line 2")
    assert "no FROM" in de.lint_dockerfile("RUN true\n", BASE)[-1]


@pytest.mark.parametrize("instruction", [
    "COPY solution/ /solution/", "COPY ./tests /tests", "ADD tests/test_outputs.py /t.py",
    "COPY solve.sh /usr/local/bin/", "COPY --chown=root:root app/test.sh /x",
    'COPY ["solution/solve.sh", "/s.sh"]', "COPY scripts/test_api.py /app/",
])
def test_lint_keeps_answers_out_of_the_image(instruction):
    problems = de.lint_dockerfile(f"FROM {BASE}\n{instruction}\n", BASE)
    assert len(problems) == 1 and "line 2" in problems[0]


@pytest.mark.parametrize("instruction", [
    "ENV OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx", "ENV DB_PASSWORD hunter2",
    "ARG GITHUB_TOKEN=abc123", "ENV AWS_SECRET_ACCESS_KEY=\"x y\"",
    "ENV SERVICE_TOKEN=abc OTHER=1",
])
def test_lint_rejects_literal_secrets(instruction):
    problems = de.lint_dockerfile(f"FROM {BASE}\n{instruction}\n", BASE)
    assert problems and all("line 2" in p for p in problems)


def test_lint_rejects_add_from_a_url_and_credentials_anywhere():
    problems = de.lint_dockerfile(f"FROM {BASE}\nADD https://example.org/x.tgz /opt/\n", BASE)
    assert len(problems) == 1 and "remote URL" in problems[0]
    key = "RUN echo '-----BEGIN OPENSSH PRIVATE KEY-----' > /root/.ssh/id"
    assert "private key" in de.lint_dockerfile(f"FROM {BASE}\n{key}\n", BASE)[0]


def test_build_rejects_a_failing_lint_before_touching_the_engine(tmp_path):
    context = _write_context(tmp_path, "FROM ubuntu:24.04\nCOPY tests/ /tests/\n")
    with pytest.raises(de.DockerfileLintError) as info:
        de.build_image(None, context, base_image=BASE, timeout_s=5)  # type: ignore[arg-type]
    assert len(info.value.problems) == 2


# ---------------------------------------------------------------------------- builds


def test_build_is_tagged_by_context_hash_and_cached(client, base_image, tmp_path):
    nonce = uuid.uuid4().hex
    context = _write_context(tmp_path, f"FROM {base_image}\nCOPY hello.txt /app/\n"
                             "RUN cat /app/hello.txt\n", {"hello.txt": nonce})
    first = de.build_image(client, context, base_image=base_image, timeout_s=120,
                           labels={"facet.test": "1"})
    try:
        assert not first.cached and first.image_tag.startswith("facet-env:")
        assert len(first.image_tag.split(":")[1]) == 64
        assert nonce in first.log and "Successfully built" in first.log
        labels = client.images.get(first.image_tag).labels
        assert labels["facet.test"] == "1" and labels[de.LABEL_CONTEXT_SHA256] in first.image_tag
        images_before = len(client.images.list(all=True))

        second = de.build_image(client, context, base_image=base_image, timeout_s=120)
        assert second.cached and second.image_tag == first.image_tag
        assert second.image_id == first.image_id
        assert len(client.images.list(all=True)) == images_before

        (context / "hello.txt").chmod(0o600)  # modes are part of the context
        third = de.build_image(client, context, base_image=base_image, timeout_s=120)
        assert not third.cached and third.image_tag != first.image_tag
        client.images.remove(third.image_tag)
    finally:
        client.images.remove(first.image_tag)


def test_build_failure_keeps_a_clear_log(client, base_image, tmp_path):
    context = _write_context(tmp_path, f"FROM {base_image}\n"
                             f"RUN echo about-to-fail-{uuid.uuid4().hex[:8]} && exit 3\n")
    with pytest.raises(de.BuildFailed) as info:
        de.build_image(client, context, base_image=base_image, timeout_s=120)
    assert "returned a non-zero code: 3" in str(info.value)
    assert "about-to-fail-" in info.value.log and "ERROR:" in info.value.log
    assert not isinstance(info.value, de.BuildTimeout)


def test_build_timeout_ends_cleanly_without_leftover_containers(client, base_image, tmp_path):
    nonce = uuid.uuid4().hex[:12]
    context = _write_context(tmp_path, f"FROM {base_image}\nRUN echo {nonce} && sleep 600\n")
    started = time.monotonic()
    with pytest.raises(de.BuildTimeout) as info:
        de.build_image(client, context, base_image=base_image, timeout_s=5)
    assert time.monotonic() - started < 30
    assert nonce in info.value.log and "timed out after 5 s" in info.value.log
    leftovers = [c for c in client.api.containers(all=True) if nonce in (c.get("Command") or "")]
    assert leftovers == []


def test_build_needs_the_base_image(client, tmp_path):
    context = _write_context(tmp_path, "FROM facet-base:does-not-exist\n")
    with pytest.raises(de.BaseImageMissing):
        de.build_image(client, context, base_image="facet-base:does-not-exist", timeout_s=5)


# ---------------------------------------------------------------------------- sandbox limits


def test_sandbox_runs_commands_as_configured(sandbox):
    result = sandbox.exec("echo out; echo err >&2; pwd; cat data.txt; exit 4")
    assert result.exit_code == 4 and not result.timed_out
    # stdout and stderr are separate pipes: their relative order is not kept
    assert sorted(result.output.splitlines()) == ["/app", "err", "line one", "out"]
    as_nobody = sandbox.exec(["sh", "-c", "id -un; pwd; echo $GREETING"], user="nobody",
                             workdir="/tmp", env={"GREETING": "hi"})
    assert as_nobody.output.split() == ["nobody", "/tmp", "hi"]


def test_sandbox_has_no_network(sandbox):
    # Only a loopback and no route at all: a connect fails in the kernel and sends nothing.
    # The probe address is TEST-NET-1 (RFC 5737), never a real host.
    probe = sandbox.exec(["sh", "-c", "ls /sys/class/net; tail -n +2 /proc/net/route | wc -l"])
    assert probe.output.split() == ["lo", "0"]
    script = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(3)\n"
        "try:\n    s.connect(('192.0.2.1', 80)); print('connected')\n"
        "except OSError as e:\n    print('errno', e.errno)\n")
    assert sandbox.exec(["python3", "-c", script]).output.strip() == "errno 101"  # ENETUNREACH
    curl = sandbox.exec("curl -sS --max-time 5 http://deb.debian.org/debian/", timeout_s=20)
    assert curl.exit_code != 0


def test_sandbox_cannot_reach_the_hosts_loopback(sandbox):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        script = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('open')\n"
            "except OSError as e:\n    print('errno', e.errno)\n")
        assert sandbox.exec(["python3", "-c", script]).output.strip() == "errno 111"


def test_memory_limit_kills_a_big_allocation(sandbox):
    result = sandbox.exec(["python3", "-c", "x = bytearray(2 * 1024**3)"], timeout_s=60)
    assert result.exit_code == 137 and result.oom_killed and result.killed_by == "memory"
    assert not result.timed_out
    assert sandbox.exec("echo still here").output == "still here\n"
    assert sandbox.peak_memory_bytes() <= SMALL.memory_bytes


def test_peak_memory_is_reported(sandbox):
    touch_100_mib = "x = bytearray(100 * 1024**2); x[::4096] = b'1' * len(x[::4096])"
    sandbox.exec(["python3", "-c", touch_100_mib])
    assert 100 * de.MiB <= sandbox.peak_memory_bytes() <= SMALL.memory_bytes


def test_fork_bomb_is_contained_and_the_sandbox_removed(client, env_image):
    started = time.monotonic()
    with de.Sandbox(client, env_image, owner=OWNER, limits=SMALL) as sb:
        result = sb.exec("bash -c ':(){ :|:& };:'", timeout_s=5)
        container_id = sb.id
    assert time.monotonic() - started < 30
    assert result.exit_code is not None or sb.gone_reason
    assert not _container_exists(client, container_id)
    assert subprocess.run(["true"]).returncode == 0  # the host still forks
    assert client.ping()


def test_infinite_loop_hits_the_wall_clock_timeout(sandbox):
    result = sandbox.exec("while :; do :; done", timeout_s=2)
    assert result.timed_out and result.killed_by == "timeout" and result.exit_code == 137
    assert 2 <= result.seconds < 6
    assert sandbox.exec("echo next").exit_code == 0


def test_gigabytes_of_output_are_capped_in_memory(sandbox):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = sandbox.exec("yes", timeout_s=3)
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert result.timed_out
    assert result.output_bytes > 10 * SMALL.output_bytes
    assert result.dropped_bytes == result.output_bytes - SMALL.output_bytes
    assert f"[facet: {result.dropped_bytes} bytes of output dropped here]" in result.output
    assert len(result.output) < SMALL.output_bytes + 100
    assert rss_growth_kib < 64 * 1024


def test_background_processes_do_not_hold_an_exec_open(sandbox):
    result = sandbox.exec("sleep 300 & echo started", timeout_s=30)
    assert result.output == "started\n" and result.exit_code == 0
    assert result.seconds < 5  # the engine stops waiting for the output ~2 s after exit


def test_a_planted_timeout_binary_is_overruled_by_the_watchdog(sandbox):
    # Untrusted code can shadow `timeout` in PATH; the host-side watchdog still ends the exec.
    sandbox.put_files({"/usr/local/bin/timeout": '#!/bin/sh\nshift 3\nexec "$@"\n'}, mode=0o755)
    result = sandbox.exec("sleep 60", timeout_s=2)
    assert result.timed_out and result.killed_by == "timeout"
    assert result.seconds < 15
    assert sandbox.exec(["/usr/bin/env", "echo", "alive"]).output == "alive\n"


def test_the_watchdog_kills_the_container_as_a_last_resort(sandbox):
    sandbox.put_files({"/usr/local/bin/timeout": '#!/bin/sh\nshift 3\nexec "$@"\n'}, mode=0o755)
    sandbox.kill_processes = lambda: False  # as when a fork bomb holds every pid
    result = sandbox.exec("sleep 60", timeout_s=1)
    assert result.timed_out and result.seconds < 20
    with pytest.raises(de.SandboxGone):
        sandbox.exec("true")


def test_disk_filling_is_contained(sandbox):
    tmp = sandbox.exec("dd if=/dev/zero of=/tmp/big bs=1M count=1024", timeout_s=30)
    assert tmp.exit_code != 0 and "No space left on device" in tmp.output
    one_file = sandbox.exec("dd if=/dev/zero of=/var/big bs=1M count=1024 status=none",
                            timeout_s=30)
    assert one_file.exit_code != 0  # 153 = SIGXFSZ without a quota, ENOSPC with one
    sandbox.exec("rm -f /var/big")
    many_files = sandbox.exec(
        "for i in $(seq 1 20); do dd if=/dev/zero of=/var/f$i bs=1M count=100 status=none; done",
        timeout_s=60)
    if sandbox.disk_quota:
        assert many_files.exit_code != 0
    else:
        assert many_files.killed_by == "disk" and many_files.seconds < 30
        with pytest.raises(de.SandboxGone, match="writable layer"):
            sandbox.exec("true")


def test_sandbox_is_not_privileged(sandbox):
    status = sandbox.exec(["grep", "-E", "^(CapEff|CapBnd|NoNewPrivs)", "/proc/self/status"])
    fields = dict(line.split(":\t") for line in status.output.splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert int(fields["CapBnd"], 16) == 0x4EB  # exactly SANDBOX_CAPABILITIES
    assert sandbox.exec("mount -t tmpfs none /mnt").exit_code != 0
    assert sandbox.exec("mknod /root/disk b 253 0").exit_code != 0
    devices = sandbox.exec("ls /dev").output.split()
    assert not [d for d in devices if d.startswith(("vd", "sd", "nvme", "loop", "xvd"))]
    assert sandbox.exec("echo 1 > /proc/sys/kernel/sysrq").exit_code != 0


# ---------------------------------------------------------------------------- files and state


def test_put_files_and_get_file_round_trip(sandbox, tmp_path):
    blob = bytes(range(256)) * 100
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/bash\necho ok\n")
    (tmp_path / "tests" / "test.sh").chmod(0o755)
    sandbox.put_files({"/data/blob.bin": blob, "/data/deep/note.txt": "héllo\n"})
    sandbox.put_files({"/tests": tmp_path / "tests"})
    sandbox.put_files({"/solution/solve.sh": "#!/bin/sh\necho solved\n"}, mode=0o755)
    assert sandbox.get_file("/data/blob.bin") == blob
    assert sandbox.get_file("/data/deep/note.txt") == "héllo\n".encode()
    assert sandbox.exec("/tests/test.sh").output == "ok\n"
    assert sandbox.exec("/solution/solve.sh").output == "solved\n"
    assert sandbox.exec("stat -c '%a %U' /data/blob.bin").output.strip() == "644 root"
    assert sandbox.get_file("/data/missing") is None
    sandbox.exec("ln -s /data/blob.bin /data/link")
    assert sandbox.get_file("/data/link") == blob
    with pytest.raises(IsADirectoryError):
        sandbox.get_file("/data")
    with pytest.raises(ValueError):
        sandbox.put_files({"/tmp/x": b"tmpfs is not reachable"})
    with pytest.raises(ValueError):
        sandbox.get_file("/data/blob.bin", max_bytes=10)


def test_snapshot_and_diff_show_what_a_solution_changed(sandbox):
    sandbox.put_files({"/app/old.txt": "to be removed\n", "/app/bin/tool": b"\x7fELF\x00"})
    before = sandbox.snapshot(["/app", "/srv/absent"])
    assert before.missing == ["/srv/absent"]
    data = before.files["/app/data.txt"]
    assert data.kind == "file" and data.size == 9 and data.mode == 0o644
    assert data.text_head == "line one\n" and len(data.sha256) == 64
    assert before.files["/app/bin/tool"].text_head is None  # binary
    assert before.files["/app"].kind == "dir"
    assert before.processes == []

    sandbox.put_files({"/solution/solve.sh": (
        "#!/bin/bash\nset -e\ncd /app\necho answer > result.txt\necho two >> data.txt\n"
        "chmod 755 main.py\nrm old.txt\nnohup sleep 300 >/dev/null 2>&1 &\n")}, mode=0o755)
    assert sandbox.exec("/solution/solve.sh").exit_code == 0
    after = sandbox.snapshot(["/app", "/srv/absent"])
    change = sandbox.diff(before, after)
    assert change.added == ["/app/result.txt"]
    assert change.removed == ["/app/old.txt"]
    assert change.modified == {"/app/data.txt": ["content", "size"], "/app/main.py": ["mode"]}
    assert change.processes_started == ["sleep 300"] and change.processes_ended == []
    assert after.files["/app/result.txt"].text_head == "answer\n"
    assert de.Snapshot.from_dict(after.to_dict()) == after
    assert de.diff_snapshots(after, after).empty


# ---------------------------------------------------------------------------- cleanup


def test_sandbox_is_removed_when_the_block_raises(client, env_image):
    with pytest.raises(RuntimeError, match="boom"):
        with de.Sandbox(client, env_image, owner=OWNER, limits=SMALL) as sb:
            container_id = sb.id
            assert _container_exists(client, container_id)
            raise RuntimeError("boom")
    assert not _container_exists(client, container_id)


def test_cleanup_leftovers_removes_labelled_containers(client, env_image):
    owner = f"{OWNER}:{uuid.uuid4().hex[:8]}"
    container = client.containers.create(
        env_image, command=["sleep", "600"], network_mode="none",
        labels={de.LABEL_SANDBOX: "1", de.LABEL_OWNER: owner})
    try:
        assert de.cleanup_leftovers(client, older_than_s=3600, owner=owner) == 0
        assert de.cleanup_leftovers(client, owner=owner) == 1
        assert not _container_exists(client, container.id)
    finally:
        if _container_exists(client, container.id):
            container.remove(force=True)


def test_cleanup_by_owner_prefix_and_only_stopped_sandboxes(client, env_image):
    # One validation's attempts share an owner prefix; a daemon restart leaves them stopped.
    first, tenth = f"{OWNER}:validation-1:", f"{OWNER}:validation-10:"
    made = {}
    for name, owner, command in (("running", first + "validate:a", ["sleep", "600"]),
                                 ("other", tenth + "validate:b", ["sleep", "600"]),
                                 ("stopped", first + "validate:c", ["true"])):
        container = client.containers.run(env_image, command=command, network_mode="none", detach=True,
                                          labels={de.LABEL_SANDBOX: "1", de.LABEL_OWNER: owner})
        made[name] = container
    made["stopped"].wait(timeout=30)
    try:
        assert de.cleanup_leftovers(client, owner_prefix=first, stopped_only=True) == 1
        assert not _container_exists(client, made["stopped"].id)
        assert _container_exists(client, made["running"].id)
        assert de.cleanup_leftovers(client, owner_prefix=first) == 1  # validation-10 is not validation-1
        assert _container_exists(client, made["other"].id)
        assert de.cleanup_leftovers(client, owner_prefix=tenth) == 1
    finally:
        for container in made.values():
            if _container_exists(client, container.id):
                container.remove(force=True)


def test_an_exec_the_engine_forgot_is_a_transient_engine_error(sandbox, monkeypatch):
    # A restarted daemon no longer knows the exec instances it had: not the command's doing.
    def forgotten(exec_id):
        raise NotFound(f"No such exec instance: {exec_id}")

    monkeypatch.setattr(sandbox.client.api, "exec_inspect", forgotten)
    with pytest.raises(de.TransientEngineError, match="the Docker daemon restarted"):
        sandbox.exec("echo hello")
    monkeypatch.undo()
    assert sandbox.exec("echo still here").output == "still here\n"


def test_a_full_output_file_keeps_everything_up_to_its_cap(sandbox, tmp_path):
    whole = sandbox.exec("seq 1 50000", output_path=tmp_path / "all.log")
    expected = "".join(f"{i}\n" for i in range(1, 50001)).encode()
    assert len(expected) > SMALL.output_bytes and whole.dropped_bytes > 0  # memory kept a head and tail
    assert (tmp_path / "all.log").read_bytes() == expected and not whole.output_path_truncated
    capped = sandbox.exec("seq 1 50000", output_path=tmp_path / "capped.log", output_path_max_bytes=1000)
    assert capped.output_path_truncated
    assert (tmp_path / "capped.log").read_bytes() == expected[:1000] + (
        f"\n[facet: log truncated at 1000 bytes; the command printed {len(expected)} bytes in all]\n").encode()
