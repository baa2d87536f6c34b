"""Settings for facet, read from environment variables.

SQLite in FACET_DATA_DIR is the zero-config default; DATABASE_URL points at PostgreSQL in CI and
production. Without CELERY_BROKER_URL a real Celery worker still runs, on the filesystem broker
(no server needed) under FACET_DATA_DIR.
"""
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"environment variable {name}: expected a boolean (1/0/true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}: expected an integer, got {value!r}") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"environment variable {name}: expected a number, got {value!r}") from None


DATA_DIR = Path(os.environ.get("FACET_DATA_DIR") or BASE_DIR / "var").resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    # A per-installation key kept in the data directory, so a fresh checkout works without set-up
    # but no two installations share a key.
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        from django.core.management.utils import get_random_secret_key

        key_file.write_text(get_random_secret_key())
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "facet_site",
    "skills",
    "scenarios",
    "tasks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a login; the login page and the token-authenticated API opt out explicitly.
    "facet_site.middleware.FacetLoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "facet_site.urls"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "facet_site.roles.context_processor",
            ],
        },
    },
]

WSGI_APPLICATION = "facet_site.wsgi.application"

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{DATA_DIR / 'facet.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web server, worker and CLI share the file: wait for locks instead of failing at once.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"timeout": 30, "transaction_mode": "IMMEDIATE"})
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
import plotly as _plotly  # noqa: E402

# plotly.js comes from the installed plotly package and is served by us, never from a CDN.
STATICFILES_DIRS = [BASE_DIR / "static", ("vendor/plotly", Path(_plotly.__file__).parent / "package_data")]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Static files are served by WhiteNoise from the finders in development and from STATIC_ROOT after
# `facet collectstatic` in production.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)

MEDIA_ROOT = DATA_DIR / "uploads"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie; kept default-compatible
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# --- Celery -----------------------------------------------------------------------------------
BROKER_DIR = DATA_DIR / "broker"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "") or "filesystem://"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        # The workers look for new job files this often (kombu's default is 1 s). Construction hands
        # a task from job to job, so the poll adds up; listing a folder 5 times a second is cheap.
        "polling_interval": env_float("FACET_BROKER_POLL_S", 0.2),
    }
else:
    # Redelivery of a job whose worker died: the visibility timeout bounds how long it stays invisible.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("FACET_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_ALWAYS_EAGER = env_bool("FACET_JOBS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_IGNORE_RESULT = True  # job state lives in our own tables, not in a result backend
CELERY_TASK_ACKS_LATE = True  # a job whose worker dies is redelivered; jobs are idempotent
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "*.llm_*": {"queue": "llm"},
    "*.docker_*": {"queue": "docker"},
}

# --- Pipeline -----------------------------------------------------------------------------------
FACET_INGEST_MAX_FILE_BYTES = env_int("FACET_INGEST_MAX_FILE_BYTES", 1_000_000)
FACET_INGEST_MAX_ARCHIVE_BYTES = env_int("FACET_INGEST_MAX_ARCHIVE_BYTES", 500_000_000)
FACET_INGEST_MAX_UPLOAD_BYTES = env_int("FACET_INGEST_MAX_UPLOAD_BYTES", 200_000_000)
FACET_NEAR_DUPLICATE_THRESHOLD = env_float("FACET_NEAR_DUPLICATE_THRESHOLD", 0.95)
FACET_EMBEDDING_BACKEND = os.environ.get("FACET_EMBEDDING_BACKEND", "onnx-int8")
FACET_MODELS_DIR = Path(os.environ.get("FACET_MODELS_DIR") or DATA_DIR / "models").resolve()
# The model endpoint: FACET_LLM_BASE_URL, _MODEL, _API_KEY(_FILE), _PROVIDER, _TEMPERATURE,
# _MAX_TOKENS, _TIMEOUT, _MAX_RETRIES, _CASSETTE, _RECORD, _PRICES, read here once. Runs and rollout
# batches lay their own "llm" section over it (scenarios.llm.llm_settings); a bad value stops startup.
from facet_site.lib.llm.settings import LLMSettings  # noqa: E402

FACET_LLM = LLMSettings.from_env(os.environ)
# A synthesis run that succeeds goes on into task construction through this job, named rather than
# imported so scenarios knows nothing of how tasks are built (tasks/jobs.py registers it).
FACET_CONSTRUCTION_JOB = "tasks.jobs.advance_construction"

# --- Task construction and validation (docs/tasks.md, docs/docker.md) ----------------------------
# A trial's solution.log and verifier.log keep the command's whole output up to this size (then a
# marker); the database keeps a 16 KiB head and tail of it.
FACET_TRIAL_LOG_MAX_BYTES = env_int("FACET_TRIAL_LOG_MAX_BYTES", 64 * 1024 * 1024)
# tasks
# The Docker Engine construction, validation and rollouts use (empty: the local socket), handed to
# lib.docker_engine.connect; DOCKER_TLS_VERIFY / DOCKER_CERT_PATH apply as for the docker CLI.
DOCKER_HOST = os.environ.get("DOCKER_HOST", "")
# The restricted base image every generated Dockerfile must start FROM (`facet base-image` builds it).
FACET_BASE_IMAGE = os.environ.get("FACET_BASE_IMAGE") or "facet-base:bookworm"
# Task imports (`facet import-tasks`, the Datasets page): an upload, an unpacked archive, one file
# in it (100 MiB, lib.harbor's own cap) and its number of entries.
FACET_IMPORT_MAX_UPLOAD_BYTES = env_int("FACET_IMPORT_MAX_UPLOAD_BYTES", FACET_INGEST_MAX_UPLOAD_BYTES)
FACET_IMPORT_MAX_ARCHIVE_BYTES = env_int("FACET_IMPORT_MAX_ARCHIVE_BYTES", 1_000_000_000)
FACET_IMPORT_MAX_FILE_BYTES = env_int("FACET_IMPORT_MAX_FILE_BYTES", 100 * 1024 * 1024)
FACET_IMPORT_MAX_ENTRIES = env_int("FACET_IMPORT_MAX_ENTRIES", 200_000)
# A starting worker removes sandbox containers older than any trial can run (left by a dead worker).
FACET_SANDBOX_MAX_AGE_S = env_int("FACET_SANDBOX_MAX_AGE_S", 7200)
# `facet worker` runs Celery beat inside the worker (unless --no-beat): every this many seconds
# tasks and validations that waited for a Docker Engine are resumed when one answers.
FACET_RESUME_WAITING_S = env_float("FACET_RESUME_WAITING_S", 60.0)
CELERY_BEAT_SCHEDULE = {
    "resume-waiting-for-docker": {"task": "tasks.jobs.resume_waiting", "schedule": FACET_RESUME_WAITING_S},
    # reviewers' re-checks and rollout trajectories that waited for Docker or lost their worker
    "resume-rechecks": {"task": "tasks.jobs.resume_rechecks", "schedule": FACET_RESUME_WAITING_S},
    "resume-rollouts": {"task": "tasks.jobs.resume_rollouts", "schedule": FACET_RESUME_WAITING_S},
}
# the funnel and the taxonomy tables are cached under a stamp of their data for at most this long
# (facet_site/stamps.py; 0: off)
FACET_PAGE_CACHE_S = env_int("FACET_PAGE_CACHE_S", 60)
# The cache holds aggregates keyed by a stamp of their data (facet_site/stamps.py, analytics): a
# folder under FACET_DATA_DIR, so every web process on the machine shares what one computed;
# FACET_CACHE_URL=redis://... shares it between machines.
if os.environ.get("FACET_CACHE_URL", "").startswith("redis"):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": os.environ["FACET_CACHE_URL"]}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                          "LOCATION": str(DATA_DIR / "cache"), "OPTIONS": {"MAX_ENTRIES": 2000}}}
# a JSON file shaped like tasks/families.json: category slug -> task family (Figure 3b)
FACET_TASK_FAMILIES = os.environ.get("FACET_TASK_FAMILIES", "")
# analytics results are cached for at most this many seconds, keyed by a stamp of the data (0: off)
FACET_ANALYTICS_CACHE_S = env_int("FACET_ANALYTICS_CACHE_S", 120)
# a review-queue lock left by a reviewer who walked away is free for others after this long
FACET_REVIEW_LOCK_MINUTES = env_int("FACET_REVIEW_LOCK_MINUTES", 15)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
