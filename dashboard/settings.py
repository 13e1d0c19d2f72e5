"""The one settings module. Every value comes from the environment, with safe local defaults.

Environment variables (see README, configuration):
  DATABASE_URL             sqlite:///path (embedded default) or postgres://user:pass@host:port/db
  REDIS_URL                Celery broker and locks (default redis://127.0.0.1:6379/0)
  OFFSETWATCH_SECRET_KEY   required when OFFSETWATCH_DEBUG is off outside the local stack
  OFFSETWATCH_DEBUG, OFFSETWATCH_ALLOWED_HOSTS, OFFSETWATCH_RUN_DIR,
  OFFSETWATCH_POLL_INTERVAL, OFFSETWATCH_STALE_AFTER, OFFSETWATCH_IO_TIMEOUT,
  OFFSETWATCH_KAFKA_PORT, OFFSETWATCH_HBASE_PORT, OFFSETWATCH_ZOOKEEPER_PORT, OFFSETWATCH_REDIS_PORT,
  OFFSETWATCH_KAFKA_BOOTSTRAP, OFFSETWATCH_HBASE_URL, OFFSETWATCH_ZOOKEEPER_HOSTS,
  OFFSETWATCH_METRICS_INCLUDE, OFFSETWATCH_METRICS_EXCLUDE, OFFSETWATCH_METRICS_PER_PARTITION,
  OFFSETWATCH_NOTIFY_WEBHOOK_URL, OFFSETWATCH_NOTIFY_EMAILS, OFFSETWATCH_NOTIFY_TIMEOUT, OFFSETWATCH_NOTIFY_RETRIES,
  OFFSETWATCH_EMAIL_HOST, _PORT, _FROM, _USER, _PASSWORD, _USE_TLS
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    """A string setting; NAME_FILE (a path) wins over NAME so secrets can come from files."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        return Path(file_path).read_text().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated list; blanks around items and empty items are dropped."""
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path, as dj-database-url reads them.
        path = unquote(parsed.path)[1:] or str(RUN_DIR / "offsetwatch.sqlite3")
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            # The demo's web server and Celery worker share the file: wait for locks, use WAL.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    if parsed.scheme in {"postgres", "postgresql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "offsetwatch",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": env_int("OFFSETWATCH_CONN_MAX_AGE", 60),
            "CONN_HEALTH_CHECKS": True,
        }
    raise ValueError(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (use sqlite or postgres)")


DEBUG = env_bool("OFFSETWATCH_DEBUG", False)
RUN_DIR = Path(env_str("OFFSETWATCH_RUN_DIR", str(BASE_DIR / ".run")))
# Local-only default key: the production settings (deployment issue) refuse to start without one.
SECRET_KEY = env_str("OFFSETWATCH_SECRET_KEY", "offset-watch-local-development-key-not-for-production")
ALLOWED_HOSTS = [h for h in env_str("OFFSETWATCH_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "dashboard",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "dashboard.urls"
WSGI_APPLICATION = "dashboard.wsgi.application"
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
            ]
        },
    }
]
DATABASES = {"default": database_from_url(env_str("DATABASE_URL", f"sqlite:///{RUN_DIR / 'offsetwatch.sqlite3'}"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [{"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"}]
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("OFFSETWATCH_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Collection
POLL_INTERVAL_S = env_float("OFFSETWATCH_POLL_INTERVAL", 10.0)
# Data older than this is shown as stale, not as current.
STALE_AFTER_S = env_float("OFFSETWATCH_STALE_AFTER", max(3 * POLL_INTERVAL_S, 30.0))
IO_TIMEOUT_S = env_float("OFFSETWATCH_IO_TIMEOUT", 5.0)
# Rows read from one store per pipeline per cycle; the first import of a long history
# continues over the next cycles instead of making one cycle unbounded.
MAX_BATCHES_PER_CYCLE = env_int("OFFSETWATCH_MAX_BATCHES_PER_CYCLE", 5000)

# Evaluation: samples in the status window; a pipeline with no batch for this many of its own
# batch intervals is stopped; lag in seconds and retention look this far back; a retention
# deadline nearer than RETENTION_WARN_S raises a warning.
EVALUATION_WINDOW_SAMPLES = env_int("OFFSETWATCH_EVALUATION_WINDOW", 6)
STOP_AFTER_INTERVALS = env_float("OFFSETWATCH_STOP_AFTER_INTERVALS", 3.0)
LAG_SECONDS_LOOKBACK_S = env_float("OFFSETWATCH_LAG_SECONDS_LOOKBACK", 3600.0)
RETENTION_WARN_S = env_float("OFFSETWATCH_RETENTION_WARN", 6 * 3600.0)

# History retention (prune, run by beat hourly): samples at full resolution for RAW, one per
# minute until MINUTE, one per hour until HOUR, then deleted; batches and problems after BATCHES
# (HBase's own TTL in the Cloudera layout is 30 days).
RETENTION_RAW_S = env_float("OFFSETWATCH_RETENTION_RAW", 24 * 3600.0)
RETENTION_MINUTE_S = env_float("OFFSETWATCH_RETENTION_MINUTE", 7 * 24 * 3600.0)
RETENTION_HOUR_S = env_float("OFFSETWATCH_RETENTION_HOUR", 30 * 24 * 3600.0)
RETENTION_BATCHES_S = env_float("OFFSETWATCH_RETENTION_BATCHES", 30 * 24 * 3600.0)
PRUNE_INTERVAL_S = env_float("OFFSETWATCH_PRUNE_INTERVAL", 3600.0)
KAFKA_LIST_OFFSETS_CHUNK = env_int("OFFSETWATCH_LIST_OFFSETS_CHUNK", 500)
# Lag in seconds from the record at the committed offset (exact) for the most lagging partitions
# of each cluster, up to this many per cycle (one small fetch each); the others are interpolated.
RECORD_TIMESTAMP_PARTITIONS = env_int("OFFSETWATCH_RECORD_TIMESTAMP_PARTITIONS", 200)

# Rewinds: a request expires if not approved within APPROVAL_TTL, an approval if no job claims it
# within CLAIM_TTL; an applied rewind with no batch seen within VERIFY_TIMEOUT fails.
# Where people reach the dashboard (e.g. https://offsetwatch.example.com): links in notifications.
PUBLIC_URL = env_str("OFFSETWATCH_PUBLIC_URL", "")
REWIND_APPROVAL_TTL_S = env_float("OFFSETWATCH_REWIND_APPROVAL_TTL", 24 * 3600.0)
REWIND_CLAIM_TTL_S = env_float("OFFSETWATCH_REWIND_CLAIM_TTL", 6 * 3600.0)
REWIND_VERIFY_TIMEOUT_S = env_float("OFFSETWATCH_REWIND_VERIFY_TIMEOUT", 3600.0)

# /metrics: which pipelines are exported (fnmatch patterns over "store/topic/group"; include
# empty = all) and whether each partition's lag is a series too. Many pipelines times many
# partitions is how a Prometheus server runs out of memory, hence the default.
METRICS_INCLUDE = env_list("OFFSETWATCH_METRICS_INCLUDE")
METRICS_EXCLUDE = env_list("OFFSETWATCH_METRICS_EXCLUDE")
METRICS_PER_PARTITION = env_bool("OFFSETWATCH_METRICS_PER_PARTITION", False)

# Exports: a request streams at most EXPORT_INLINE_MAX_ROWS rows; a larger export runs as a
# background job writing a file under EXPORT_DIR (kept EXPORT_RETENTION_S). Chart images are
# rendered by kaleido with Chromium at CHROMIUM_PATH (empty: kaleido's own lookup, BROWSER_PATH
# then PATH); one render may take IMAGE_TIMEOUT_S.
EXPORT_INLINE_MAX_ROWS = env_int("OFFSETWATCH_EXPORT_INLINE_MAX_ROWS", 200_000)
EXPORT_DIR = Path(env_str("OFFSETWATCH_EXPORT_DIR", str(RUN_DIR / "exports")))
EXPORT_RETENTION_S = env_float("OFFSETWATCH_EXPORT_RETENTION", 7 * 24 * 3600.0)
CHROMIUM_PATH = env_str("OFFSETWATCH_CHROMIUM_PATH", "")
IMAGE_TIMEOUT_S = env_float("OFFSETWATCH_IMAGE_TIMEOUT", 30.0)

# Notifications of rewinds (dashboard.notify): a JSON POST to a webhook and/or an email to a list
# of addresses; with neither set nothing is sent. Each delivery waits NOTIFY_TIMEOUT_S at most
# and is retried NOTIFY_RETRIES times with growing pauses on transient errors (5xx, timeouts).
NOTIFY_WEBHOOK_URL = env_str("OFFSETWATCH_NOTIFY_WEBHOOK_URL", "")
NOTIFY_EMAILS = env_list("OFFSETWATCH_NOTIFY_EMAILS")
NOTIFY_TIMEOUT_S = env_float("OFFSETWATCH_NOTIFY_TIMEOUT", 10.0)
NOTIFY_RETRIES = env_int("OFFSETWATCH_NOTIFY_RETRIES", 5)
EMAIL_HOST = env_str("OFFSETWATCH_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("OFFSETWATCH_EMAIL_PORT", 25)
DEFAULT_FROM_EMAIL = env_str("OFFSETWATCH_EMAIL_FROM", "offsetwatch@localhost")
EMAIL_HOST_USER = env_str("OFFSETWATCH_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env_str("OFFSETWATCH_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("OFFSETWATCH_EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = NOTIFY_TIMEOUT_S

# The local stack (python manage.py stack / demo): loopback ports and the addresses built on them.
STACK_KAFKA_PORT = env_int("OFFSETWATCH_KAFKA_PORT", 19092)
STACK_HBASE_PORT = env_int("OFFSETWATCH_HBASE_PORT", 19090)
STACK_ZOOKEEPER_PORT = env_int("OFFSETWATCH_ZOOKEEPER_PORT", 12181)
STACK_REDIS_PORT = env_int("OFFSETWATCH_REDIS_PORT", urlparse(REDIS_URL).port or 6379)
KAFKA_BOOTSTRAP = env_str("OFFSETWATCH_KAFKA_BOOTSTRAP", f"127.0.0.1:{STACK_KAFKA_PORT}")
HBASE_URL = env_str("OFFSETWATCH_HBASE_URL", f"hbase://127.0.0.1:{STACK_HBASE_PORT}/stream_kafka_offsets")
ZOOKEEPER_HOSTS = env_str("OFFSETWATCH_ZOOKEEPER_HOSTS", f"127.0.0.1:{STACK_ZOOKEEPER_PORT}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("OFFSETWATCH_LOG_LEVEL", "INFO")},
    # kaleido and its browser driver log every image at INFO: kept to warnings.
    "loggers": {name: {"level": "WARNING"} for name in ("kaleido", "choreographer", "logistro")},
}
