"""Settings for the test suite: the real settings, with a data directory of its own."""
import os
from pathlib import Path

_base = Path(__file__).resolve().parent.parent
# A data directory (and so a broker folder) per test process: two test runs on one checkout
# never take each other's queued jobs. Worker processes started by the tests inherit it.
os.environ.setdefault("FACET_DATA_DIR", str(_base / "var" / "test" / f"run-{os.getpid()}"))
# The exported ONNX model is shared with the main data directory, so tests don't re-export it.
os.environ.setdefault("FACET_MODELS_DIR", str(_base / "var" / "models"))

from .settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not memory, so that a worker process started by a test sees the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}  # noqa: F405
else:
    # A test database per test process too: two runs against one PostgreSQL server (parallel
    # development sessions, CI next to a developer) never drop each other's database.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}  # noqa: F405
