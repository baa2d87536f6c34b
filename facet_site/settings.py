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
    # django-ninja as an app: /api/docs serves Swagger UI from its bundled static files, not a CDN
    "ninja",
    "facet_site",
    "skills",
    "scenarios",
    "tasks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "facet_site.middleware.ContentSecurityPolicyMiddleware",
    # NUL bytes and integers past 64 bits: a 400, whatever view they were meant for
    "facet_site.middleware.BadInputMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # parses uploads under FACET_UPLOAD_MAX_BYTES before the CSRF check or a view reads the body
    "facet_site.uploads.UploadLimitMiddleware",
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
                "facet_site.workers.context_processor",
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
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend plus a cap on the connections one process opens at once (facet_site/postgresql):
    # 0 here (none); an llm worker sets it to FACET_LLM_DB_CONNECTIONS for its threads to share.
    DATABASES["default"].update(ENGINE="facet_site.postgresql", CONNECTIONS_PER_PROCESS=0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed password logins per username and per client address within the window, then refused
# until it passes (facet_site/login.py). Behind a proxy, name the header holding the client's
# address (e.g. HTTP_X_REAL_IP), or every user shares the proxy's address.
AUTHENTICATION_BACKENDS = ["facet_site.login.ThrottledModelBackend"]
FACET_LOGIN_MAX_FAILURES = env_int("FACET_LOGIN_MAX_FAILURES", 5)
FACET_LOGIN_MAX_FAILURES_PER_IP = env_int("FACET_LOGIN_MAX_FAILURES_PER_IP", 30)
FACET_LOGIN_WINDOW_S = env_int("FACET_LOGIN_WINDOW_S", 15 * 60)
FACET_TRUSTED_PROXY_HEADER = os.environ.get("FACET_TRUSTED_PROXY_HEADER", "")

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
# Uploaded files go to disk under the data directory (not /tmp), through a handler that stops
# reading the body once a file passes the largest upload limit (facet_site/uploads.py): a 1 GiB
# body is refused after the first bytes past the limit, never received in full.
FILE_UPLOAD_TEMP_DIR = str(DATA_DIR / "upload-tmp")
(DATA_DIR / "upload-tmp").mkdir(exist_ok=True)
FILE_UPLOAD_HANDLERS = ["facet_site.uploads.LimitedMemoryUploadHandler", "facet_site.uploads.LimitedUploadHandler"]

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie; kept default-compatible
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# --- Security behind HTTPS (docs/security.md, "Production settings") ------------------------------
# FACET_HTTPS=1 when users reach facet over HTTPS: cookies only over HTTPS, HTTP redirected, HSTS
# for FACET_HSTS_SECONDS (a year unless set). FACET_PROXY_SSL_HEADER=1 when a proxy terminates TLS
# and sets X-Forwarded-Proto (only then: a client could set it itself).
FACET_HTTPS = env_bool("FACET_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = FACET_HTTPS
SECURE_SSL_REDIRECT = env_bool("FACET_SSL_REDIRECT", FACET_HTTPS)
SECURE_HSTS_SECONDS = env_int("FACET_HSTS_SECONDS", 31_536_000 if FACET_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("FACET_HSTS_INCLUDE_SUBDOMAINS", FACET_HTTPS)
SECURE_HSTS_PRELOAD = env_bool("FACET_HSTS_PRELOAD", False)
if env_bool("FACET_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Our own origin only, no inline script (facet_site/middleware.py); inline styles stay allowed for
# plotly and Swagger UI, which set them; data: images are plotly's and Swagger UI's icons.
FACET_CSP = os.environ.get("FACET_CSP") or (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'")

# --- Celery -----------------------------------------------------------------------------------
BROKER_DIR = DATA_DIR / "broker"
# "localhost" only because kombu warns on every connection to a URL without a host; the filesystem
# transport ignores it.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "") or "filesystem://localhost/"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control", "damaged"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    # kombu's filesystem transport with message files written and taken whole (its own lets a worker
    # read a half-written file, lose the job and stop); see facet_site/lib/filesystem_broker.py
    CELERY_BROKER_TRANSPORT = "facet-filesystem"  # registered by facet_site/celery.py
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        # taken messages are renamed here, so it must share the queue folder's filesystem
        "processed_folder": str(BROKER_DIR / "processed"),
        "damaged_folder": str(BROKER_DIR / "damaged"),
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
# All extraction areas under DATA_DIR/ingest together may hold at most this much (docs/operations.md);
# an archive that would pass it fails its batch with a message saying so.
FACET_INGEST_AREA_MAX_BYTES = env_int("FACET_INGEST_AREA_MAX_BYTES", 2_000_000_000)
# skills stored per transaction (and per progress update) during ingest
FACET_INGEST_CHUNK_SIZE = env_int("FACET_INGEST_CHUNK_SIZE", 256)
FACET_NEAR_DUPLICATE_THRESHOLD = env_float("FACET_NEAR_DUPLICATE_THRESHOLD", 0.95)
FACET_EMBEDDING_BACKEND = os.environ.get("FACET_EMBEDDING_BACKEND", "onnx-int8")
FACET_MODELS_DIR = Path(os.environ.get("FACET_MODELS_DIR") or DATA_DIR / "models").resolve()
# The model endpoint: FACET_LLM_BASE_URL, _MODEL, _API_KEY(_FILE), _PROVIDER, _TEMPERATURE,
# _MAX_TOKENS, _TIMEOUT, _MAX_RETRIES, _CASSETTE, _RECORD, _PRICES, read here once. Runs and rollout
# batches lay their own "llm" section over it (scenarios.llm.llm_settings); a bad value stops startup.
from facet_site.lib.llm.settings import LLMSettings, endpoints_from_env  # noqa: E402

FACET_LLM = LLMSettings.from_env(os.environ)
# Named endpoints a run or rollout batch picks by "llm.endpoint" (docs/security.md): "default" is
# FACET_LLM; FACET_LLM_ENDPOINTS (JSON) adds others. URLs, keys and cassettes stay operator-set.
FACET_LLM_ENDPOINTS = endpoints_from_env(os.environ, FACET_LLM)
# Keys for the endpoints admins define in the Django admin (scenarios/endpoints.py), chosen there by
# name, never typed: FACET_LLM_KEY_<NAME>=<key> variables (name: <name> in lower case) and the files
# of FACET_LLM_KEY_DIR (name: the file's name). Their values never reach a page, a run or the database.
FACET_LLM_KEYS = {var[len("FACET_LLM_KEY_"):].lower(): value for var, value in os.environ.items()
                  if var.startswith("FACET_LLM_KEY_") and var != "FACET_LLM_KEY_DIR" and value.strip()}
FACET_LLM_KEY_DIR = os.environ.get("FACET_LLM_KEY_DIR", "").strip()
# Scale (README "Workers, Redis and several machines"): `facet worker` serves the llm queue with
# this many threads, i.e. calls in flight per worker process; FACET_LLM_LIMITS (JSON, by endpoint
# base URL, lib/llm/limits.py) caps concurrent requests, requests/min and tokens/min per endpoint
# and model, counted in Redis (FACET_LLM_LIMITS_REDIS, else a redis:// broker) for every worker.
FACET_LLM_CONCURRENCY = env_int("FACET_LLM_CONCURRENCY", 64)
# ... and its threads share at most this many PostgreSQL connections: a thread holds one only while it
# reads or writes (never while its call waits), so a few serve 64 threads and max_connections is
# budgeted per worker, not per thread.
FACET_LLM_DB_CONNECTIONS = env_int("FACET_LLM_DB_CONNECTIONS", 16)
from facet_site.lib.llm.limits import LimitTable  # noqa: E402

FACET_LLM_LIMITS = LimitTable.parse(os.environ.get("FACET_LLM_LIMITS"))
FACET_LLM_LIMITS_REDIS = os.environ.get("FACET_LLM_LIMITS_REDIS", "") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "")
# before measured latencies exist, run estimates assume this many seconds per call
FACET_LLM_DEFAULT_LATENCY_S = env_float("FACET_LLM_DEFAULT_LATENCY_S", 20.0)
# A synthesis run that succeeds goes on into task construction through this job, named rather than
# imported so scenarios knows nothing of how tasks are built (tasks/jobs.py registers it).
FACET_CONSTRUCTION_JOB = "tasks.jobs.advance_construction"
# A reviewer's category override reaches the labels of tasks built from that skill through this job,
# named for the same reason: skills knows nothing of tasks (tasks/jobs.py registers it).
FACET_CATEGORY_CHANGED_JOB = "tasks.jobs.relabel_skill_tasks"

# --- Task construction and validation (docs/tasks.md, docs/docker.md) ----------------------------
# A trial's solution.log and verifier.log keep the command's whole output up to this size (then a
# marker); the database keeps a 16 KiB head and tail of it.
FACET_TRIAL_LOG_MAX_BYTES = env_int("FACET_TRIAL_LOG_MAX_BYTES", 64 * 1024 * 1024)
# Every validation runs the nop and the oracle this many times each and rejects the task as `flaky`
# when the runs disagree (a run's "construction": {"trial_runs": n} overrides it; re-checks run
# each validation once). Each extra run costs one more container per trial kind, about the
# duration of one nop plus one oracle trial when there are no cores to run it alongside
# (docs/tasks.md, bench/validation.py). Trials of one validation run concurrently, up to
# FACET_VALIDATION_PARALLEL_TRIALS at once (0: one per core, at most 4).
FACET_VALIDATION_TRIAL_RUNS = env_int("FACET_VALIDATION_TRIAL_RUNS", 2)
FACET_VALIDATION_PARALLEL_TRIALS = env_int("FACET_VALIDATION_PARALLEL_TRIALS", 0)
# tasks
# The Docker Engine construction, validation and rollouts use (empty: the local socket), handed to
# lib.docker_engine.connect; DOCKER_TLS_VERIFY / DOCKER_CERT_PATH apply as for the docker CLI.
DOCKER_HOST = os.environ.get("DOCKER_HOST", "")
# The restricted base image every generated Dockerfile must start FROM (`facet base-image` builds it).
FACET_BASE_IMAGE = os.environ.get("FACET_BASE_IMAGE") or "facet-base:bookworm"
# Task imports (`facet import-tasks`, the Datasets page): an upload, an unpacked archive, one file
# in it (100 MiB, lib.harbor's own cap) and its number of entries.
FACET_IMPORT_MAX_UPLOAD_BYTES = env_int("FACET_IMPORT_MAX_UPLOAD_BYTES", FACET_INGEST_MAX_UPLOAD_BYTES)
# The upload handler stops reading any uploaded file past this (each form then checks its own limit).
FACET_UPLOAD_MAX_BYTES = max(FACET_INGEST_MAX_UPLOAD_BYTES, FACET_IMPORT_MAX_UPLOAD_BYTES)
FACET_IMPORT_MAX_ARCHIVE_BYTES = env_int("FACET_IMPORT_MAX_ARCHIVE_BYTES", 1_000_000_000)
FACET_IMPORT_MAX_FILE_BYTES = env_int("FACET_IMPORT_MAX_FILE_BYTES", 100 * 1024 * 1024)
FACET_IMPORT_MAX_ENTRIES = env_int("FACET_IMPORT_MAX_ENTRIES", 200_000)
# Issue 17 (docs/datasets.md): the limit on all files of one imported task (each file also obeys
# FACET_IMPORT_MAX_FILE_BYTES); binary files up to FACET_BLOB_INLINE_BYTES sit in the database row,
# larger ones under DATA_DIR/blobs/, stored once however many tasks hold them.
FACET_IMPORT_MAX_TASK_BYTES = env_int("FACET_IMPORT_MAX_TASK_BYTES", 500 * 1024 * 1024)
FACET_BLOB_INLINE_BYTES = env_int("FACET_BLOB_INLINE_BYTES", 64 * 1024)
# A task's base image -> a local image that stands in for it (JSON object, e.g.
# {"python:3.11-slim": "facet-base:bookworm"}); each import may add its own (`--image-map`).
import json as _json  # noqa: E402

from django.core.exceptions import ImproperlyConfigured as _Improper  # noqa: E402

# Exports rewrite FROM FACET_BASE_IMAGE to this public image plus the base packages, apt pinned to
# the Debian snapshot of the same date (facet_site/lib/harbor/portable.py); a digest form
# ("debian@sha256:...") pins harder.
FACET_EXPORT_BASE_IMAGE = os.environ.get("FACET_EXPORT_BASE_IMAGE") or "debian:bookworm-20250113-slim"
FACET_EXPORT_APT_SNAPSHOT = os.environ.get("FACET_EXPORT_APT_SNAPSHOT") or "20250113T000000Z"
FACET_IMAGE_MAP = _json.loads(os.environ.get("FACET_IMAGE_MAP") or "{}")
if not isinstance(FACET_IMAGE_MAP, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in FACET_IMAGE_MAP.items()):
    raise _Improper('FACET_IMAGE_MAP must be a JSON object of image names, e.g. {"python:3.11-slim": '
                               '"facet-base:bookworm"}')
# A starting worker removes sandbox containers older than any trial can run (left by a dead worker).
FACET_SANDBOX_MAX_AGE_S = env_int("FACET_SANDBOX_MAX_AGE_S", 7200)
# `facet worker` runs Celery beat inside the worker (unless --no-beat): every this many seconds
# tasks and validations that waited for a Docker Engine are resumed when one answers.
FACET_RESUME_WAITING_S = env_float("FACET_RESUME_WAITING_S", 60.0)
# Every worker records a heartbeat this often (facet_site/workers.py); pages say "no worker is
# running" when jobs wait on a queue no worker has been seen consuming for FACET_WORKER_SEEN_S.
FACET_WORKER_HEARTBEAT_S = env_float("FACET_WORKER_HEARTBEAT_S", 10.0)
FACET_WORKER_SEEN_S = env_float("FACET_WORKER_SEEN_S", 60.0)
# Job leases (facet_site/leases.py, docs/operations.md): every running job record (ingest batch,
# synthesis item and retrieval, construction step, validation, re-check, rollout trajectory,
# export, import) is stamped by its worker every FACET_JOB_HEARTBEAT_S; one silent for
# FACET_JOB_LEASE_S lost its worker, and the periodic resume_stalled job queues it again.
FACET_JOB_HEARTBEAT_S = env_float("FACET_JOB_HEARTBEAT_S", 20.0)
FACET_JOB_LEASE_S = env_float("FACET_JOB_LEASE_S", 120.0)
# One periodic job resumes every kind (facet_site/recovery.py): ingest batches, synthesis runs,
# construction, validations, re-checks, rollouts, exports and imports that waited for Docker or
# lost their worker. The per-kind jobs (tasks.jobs.resume_*) stay for running by hand.
CELERY_BEAT_SCHEDULE = {
    "resume-stalled": {"task": "facet_site.jobs.resume_stalled", "schedule": FACET_RESUME_WAITING_S},
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
    # faiss logs every CPU build it tries before the one it loads ("No module named
    # faiss.swigfaiss_avx512"): alarming and meaningless to a reader, so only its warnings show.
    "loggers": {"django.db.backends": {"level": "INFO"}, "faiss.loader": {"level": "WARNING"}},
}
