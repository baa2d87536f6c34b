"""What `facet demo` prints: one line per step, libraries' noise in a log file it names, the logins
and the URL last, all of it on one screen."""
import logging
import os
import warnings
from io import StringIO

import pytest
from django.core.management import call_command

from facet_site.management.commands.demo import DEMO_USERS, third_party_output_in

SCREEN_LINES = 45


def test_libraries_log_to_the_file_not_the_terminal(tmp_path, capsys):
    log = tmp_path / "demo.log"
    root = logging.getLogger()
    console = logging.StreamHandler()  # what Django's LOGGING puts on the root logger
    root.addHandler(console)
    try:
        with third_party_output_in(log):
            logging.getLogger("faiss.loader").warning("Could not load library with AVX512 support")
            logging.getLogger("onnxruntime.quantization").warning("Quantization parameters for tensor not specified")
            warnings.warn("pkg_resources is deprecated as an API", DeprecationWarning, stacklevel=1)
        assert console in root.handlers  # given back afterwards
    finally:
        root.removeHandler(console)
    text = log.read_text()
    assert "AVX512" in text and "Quantization parameters" in text and "pkg_resources is deprecated" in text
    err = capsys.readouterr().err
    assert "AVX512" not in err and "Quantization" not in err and "pkg_resources" not in err


@pytest.fixture(autouse=True)
def docker_host_restored(monkeypatch):
    original = os.environ.get("DOCKER_HOST")
    monkeypatch.setenv("DOCKER_HOST", "placeholder")
    if original is None:
        monkeypatch.delenv("DOCKER_HOST")
    else:
        monkeypatch.setenv("DOCKER_HOST", original)


@pytest.mark.django_db(transaction=True)
def test_the_demo_fits_on_one_screen_with_the_logins_and_the_url_last(settings):
    out = StringIO()
    call_command("demo", "--no-docker", stdout=out, stderr=out)
    lines = out.getvalue().rstrip("\n").splitlines()
    # on a terminal the progress lines of a step ("  tasks: 3 validating") overwrite each other
    shown = [line for line in lines if not line.startswith(("  tasks: ", "  rollouts: "))]
    assert len(shown) <= SCREEN_LINES, "\n".join(shown)
    text = "\n".join(lines)
    assert f"details in {settings.DATA_DIR / 'logs' / 'demo.log'}" in lines[0]
    for step in ("Ingest: demo corpus", "Synthesis run #", "Task construction", "Funnel (Table 5)", "Rollouts:"):
        assert step in text, step
    assert "ModuleNotFoundError" not in text and "faiss" not in text and "Traceback" not in text
    last = "\n".join(lines[-6:])
    assert all(f"  {role:<9} login: {username} / {password}" in last for username, password, role in DEMO_USERS), last
    assert "http://127.0.0.1:8000" in lines[-1], last
    assert "Tasks of run #" in (settings.DATA_DIR / "logs" / "demo.log").read_text()  # each task's story
