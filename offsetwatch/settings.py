"""The one settings module. Every value comes from the environment, with safe local defaults.
Over 400 lines because it is the one place every setting and its environment variable are read
(docs/configuration.md lists them); splitting it would hide where a value comes from.

Environment variables (see README, configuration):
  DATABASE_URL             sqlite:///path (embedded default) or postgres://user:pass@host:port/db
  REDIS_URL                Celery broker and locks (default redis://127.0.0.1:6379/0)
  OFFSETWATCH_SECRET_KEY   required when OFFSETWATCH_DEBUG is off outside the local stack
  OFFSETWATCH_DEBUG, OFFSETWATCH_ALLOWED_HOSTS, OFFSETWATCH_RUN_DIR,
  OFFSETWATCH_POLL_INTERVAL, OFFSETWATCH_STALE_AFTER, OFFSETWATCH_IO_TIMEOUT,
  OFFSETWATCH_KAFKA_PORT, OFFSETWATCH_HBASE_PORT, OFFSETWATCH_ZOOKEEPER_PORT, OFFSETWATCH_REDIS_PORT,
  OFFSETWATCH_KAFKA_BOOTSTRAP, OFFSETWATCH_HBASE_URL, OFFSETWATCH_ZOOKEEPER_HOSTS,
  OFFSETWATCH_METRICS_INCLUDE, OFFSETWATCH_METRICS_EXCLUDE, OFFSETWATCH_METRICS_PER_PARTITION,
  OFFSETWATCH_NOTIFY_TIMEOUT, OFFSETWATCH_NOTIFY_RETRIES, OFFSETWATCH_RESOLVE_AFTER_SAMPLES,
  OFFSETWATCH_RENOTIFY_AFTER, OFFSETWATCH_NOTIFY_SWEEP_INTERVAL, OFFSETWATCH_NOTIFY_BACKOFF, OFFSETWATCH_ARCHIVE_AFTER
  OFFSETWATCH_ENV (development | production), OFFSETWATCH_CSRF_TRUSTED_ORIGINS, OFFSETWATCH_SECURE_COOKIES,
  OFFSETWATCH_SECURE_PROXY_SSL_HEADER, OFFSETWATCH_HSTS_SECONDS, OFFSETWATCH_HSTS_INCLUDE_SUBDOMAINS,
  OFFSETWATCH_SERVE_STATIC, OFFSETWATCH_STATIC_ROOT, OFFSETWATCH_LOG_FORMAT, OFFSETWATCH_LOG_LEVEL,
  OFFSETWATCH_CELERY_QUEUES, OFFSETWATCH_CELERY_CONCURRENCY, OFFSETWATCH_CELERY_MAX_TASKS_PER_CHILD,
  OFFSETWATCH_POLL_TIME_LIMIT, OFFSETWATCH_POLL_LOCK_TTL, OFFSETWATCH_POLL_QUEUED_TTL, OFFSETWATCH_POLL_BACKOFF_MAX,
  OFFSETWATCH_POLL_PROBE_TIMEOUT, OFFSETWATCH_COLLECTOR_STALE_AFTER, OFFSETWATCH_KAFKA_CLIENT_CONFIGS,
  OFFSETWATCH_DB_CONNECT_TIMEOUT, OFFSETWATCH_DB_RETRY_AFTER, OFFSETWATCH_FUTURE_BATCH_TOLERANCE,
  OFFSETWATCH_LATE_BATCH_WINDOW, OFFSETWATCH_STORE_DISCOVERY_INTERVAL, OFFSETWATCH_REWIND_CLAIM_LEASE,
  OFFSETWATCH_CLUSTER_SHARD_PARTITIONS
"""
from __future__ import annotations

import json
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


def env_json_object(name: str) -> dict:
    """A JSON object (NAME or NAME_FILE); empty when unset. Errors name the variable."""
    raw = env_str(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object ({{...}}), not {type(value).__name__}")
    return value


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
            # A database host that accepts the connection but never answers (frozen, black-holed)
            # fails the request after this many seconds (libpq's minimum is 2) instead of holding
            # a web worker until gunicorn kills it.
            "OPTIONS": {"connect_timeout": max(2, env_int("OFFSETWATCH_DB_CONNECT_TIMEOUT", 5))},
        }
    raise ValueError(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (use sqlite or postgres)")


# Production is said explicitly (compose sets it), not guessed from DEBUG: the tests and the demo
# also run with DEBUG off, on the local defaults below, and must keep doing so.
DEPLOY_ENV = env_str("OFFSETWATCH_ENV", "development").strip().lower()
if DEPLOY_ENV not in {"development", "production"}:
    raise ValueError(f"OFFSETWATCH_ENV={DEPLOY_ENV!r} is not a known environment (use development or production)")
PRODUCTION = DEPLOY_ENV == "production"
DEBUG = env_bool("OFFSETWATCH_DEBUG", False)
RUN_DIR = Path(env_str("OFFSETWATCH_RUN_DIR", str(BASE_DIR / ".run")))
# Local-only default key: production refuses to start with it (check_production below).
LOCAL_SECRET_KEY = "offset-watch-local-development-key-not-for-production"
SECRET_KEY = env_str("OFFSETWATCH_SECRET_KEY", LOCAL_SECRET_KEY)
ALLOWED_HOSTS = [h for h in env_str("OFFSETWATCH_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
MIN_SECRET_KEY_LENGTH = 50


def check_production(*, secret_key: str, debug: bool, allowed_hosts: list[str]) -> None:
    """Refuse settings that are unsafe on a network; the error names the variable and the fix."""
    from django.core.exceptions import ImproperlyConfigured

    if secret_key == LOCAL_SECRET_KEY or secret_key.startswith("change-me"):
        raise ImproperlyConfigured(
            "OFFSETWATCH_SECRET_KEY is the local default or the .env.example placeholder: set "
            "OFFSETWATCH_SECRET_KEY (or OFFSETWATCH_SECRET_KEY_FILE) to a random value of at least "
            f"{MIN_SECRET_KEY_LENGTH} characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'")
    if len(secret_key) < MIN_SECRET_KEY_LENGTH:
        raise ImproperlyConfigured(
            f"OFFSETWATCH_SECRET_KEY has {len(secret_key)} characters: set it to a random value of at least "
            f"{MIN_SECRET_KEY_LENGTH} characters")
    if debug:
        raise ImproperlyConfigured(
            "OFFSETWATCH_DEBUG is on with OFFSETWATCH_ENV=production: debug pages show settings and code to "
            "anyone; set OFFSETWATCH_DEBUG=false")
    if not allowed_hosts or "*" in allowed_hosts:
        raise ImproperlyConfigured(
            f"OFFSETWATCH_ALLOWED_HOSTS is {'empty' if not allowed_hosts else 'a wildcard (*)'}: set it to the "
            "comma-separated host names people use to reach the dashboard (e.g. offsetwatch.example.com)")


if PRODUCTION:
    check_production(secret_key=SECRET_KEY, debug=DEBUG, allowed_hosts=ALLOWED_HOSTS)

# Behind TLS (production) cookies travel only over HTTPS; a trial over plain HTTP turns this off.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("OFFSETWATCH_SECURE_COOKIES", PRODUCTION)
# Full origins (https://offsetwatch.example.com) whose POSTs pass the CSRF check behind a proxy.
CSRF_TRUSTED_ORIGINS = env_list("OFFSETWATCH_CSRF_TRUSTED_ORIGINS")
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("https://", "http://")):
        raise ValueError(f"OFFSETWATCH_CSRF_TRUSTED_ORIGINS: {_origin!r} must be a full origin (https://host[:port])")
# Opt-in: believe X-Forwarded-Proto only when a proxy that always sets it is the one way in.
if env_bool("OFFSETWATCH_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Opt-in HSTS: once browsers saw it they refuse plain HTTP for that long, so it is never a default.
SECURE_HSTS_SECONDS = env_int("OFFSETWATCH_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("OFFSETWATCH_HSTS_INCLUDE_SUBDOMAINS", False)

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
    # PostgreSQL away: 503 (JSON under /api/) instead of a server error (dashboard/unavailable.py).
    "dashboard.unavailable.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "offsetwatch.urls"
WSGI_APPLICATION = "offsetwatch.wsgi.application"
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
# The Retry-After (seconds) of the 503 answered while the database is unavailable.
DATABASE_RETRY_AFTER_S = env_int("OFFSETWATCH_DB_RETRY_AFTER", 10)
AUTH_PASSWORD_VALIDATORS = [{"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"}]
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("OFFSETWATCH_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("OFFSETWATCH_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# gunicorn serves the collected static files itself through WhiteNoise (compressed, cache-forever
# names from the manifest; `collectstatic` must have run): no separate web server to keep in step.
SERVE_STATIC = env_bool("OFFSETWATCH_SERVE_STATIC", PRODUCTION)
if SERVE_STATIC:
    MIDDLEWARE.insert(MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
                      "whitenoise.middleware.WhiteNoiseMiddleware")
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
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
# Queues: source polls go to "collect", everything else (prune, rewind expiry, exports,
# notifications) to "default", so collectors can be scaled, or kept apart from slow exports, by
# running workers on one queue each. A worker consumes OFFSETWATCH_CELERY_QUEUES (both by default).
COLLECT_QUEUE, DEFAULT_QUEUE = "collect", "default"
CELERY_TASK_DEFAULT_QUEUE = DEFAULT_QUEUE
CELERY_TASK_ROUTES = {
    "collectors.tasks.poll_store": {"queue": COLLECT_QUEUE},
    "collectors.tasks.poll_cluster": {"queue": COLLECT_QUEUE},
}
CELERY_QUEUES = env_list("OFFSETWATCH_CELERY_QUEUES", f"{COLLECT_QUEUE},{DEFAULT_QUEUE}")
for _queue in CELERY_QUEUES:
    if _queue not in {COLLECT_QUEUE, DEFAULT_QUEUE}:
        raise ValueError(f"OFFSETWATCH_CELERY_QUEUES: unknown queue {_queue!r} (use {COLLECT_QUEUE}, {DEFAULT_QUEUE})")
CELERY_TASK_QUEUES = {name: {"exchange": name, "routing_key": name} for name in CELERY_QUEUES}
# Processes per worker (unset: one per core). Polls wait on I/O, so a worker per machine with a
# few processes each is the unit of scale; prefetch 1 hands each poll to the next free process
# instead of queueing several behind one slow source.
CELERY_WORKER_CONCURRENCY = env_int("OFFSETWATCH_CELERY_CONCURRENCY", 0) or None
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Reconnect to a broker that is back within a second, not on kombu's 2-30 s schedule.
CELERY_WORKER_CONSUMER = "collectors.consumer:QuickReconnectConsumer"
# Recycle a worker process after this many tasks (0: never), bounding slow leaks of client libraries.
CELERY_WORKER_MAX_TASKS_PER_CHILD = env_int("OFFSETWATCH_CELERY_MAX_TASKS_PER_CHILD", 0) or None

# Collection
POLL_INTERVAL_S = env_float("OFFSETWATCH_POLL_INTERVAL", 10.0)
# Data older than this is shown as stale, not as current.
STALE_AFTER_S = env_float("OFFSETWATCH_STALE_AFTER", max(3 * POLL_INTERVAL_S, 30.0))
IO_TIMEOUT_S = env_float("OFFSETWATCH_IO_TIMEOUT", 5.0)
# A poll may take a few I/O timeouts; the hard limit (seconds) kills a stuck one, the soft limit
# 15 s earlier lets it record its failure first.
POLL_HARD_TIME_LIMIT_S = env_int("OFFSETWATCH_POLL_TIME_LIMIT", max(30, int(IO_TIMEOUT_S * 6)) + 15)
POLL_SOFT_TIME_LIMIT_S = max(1, POLL_HARD_TIME_LIMIT_S - 15)
# A source's poll lock lives this long and is renewed while its poll runs, so a killed worker's
# sources are polled again within it (not after the whole time limit).
POLL_LOCK_TTL_S = env_float("OFFSETWATCH_POLL_LOCK_TTL", max(3 * IO_TIMEOUT_S, 3.0))
# A source already queued is not enqueued again until its poll starts or this many seconds pass
# (a queued poll older than this expires unrun: its source is enqueued afresh).
POLL_QUEUED_TTL_S = env_float("OFFSETWATCH_POLL_QUEUED_TTL", max(3 * POLL_INTERVAL_S, 30.0))
# A failing source's polls with the full I/O timeout back off (interval x 2^k apart), at most
# this many seconds apart.
POLL_BACKOFF_MAX_S = env_float("OFFSETWATCH_POLL_BACKOFF_MAX", 60.0)
# A failing source is polled every cycle, but between its backed-off full attempts with this
# short I/O timeout (a probe): it holds a worker briefly and is seen back within one interval.
POLL_PROBE_TIMEOUT_S = env_float("OFFSETWATCH_POLL_PROBE_TIMEOUT", min(1.0, IO_TIMEOUT_S))
# The collectors (beat, workers) and a source count as down after this many seconds without a
# tick or a poll.
COLLECTOR_STALE_AFTER_S = env_float("OFFSETWATCH_COLLECTOR_STALE_AFTER", 2 * POLL_INTERVAL_S)
# librdkafka settings per cluster name (security.protocol, sasl.*, ssl.*): used for the cluster's
# watermarks and for Kafka group-offset stores on it. Secrets stay out of the database; use
# OFFSETWATCH_KAFKA_CLIENT_CONFIGS_FILE for a mounted secret file.
KAFKA_CLIENT_CONFIGS = env_json_object("OFFSETWATCH_KAFKA_CLIENT_CONFIGS")
for _cluster, _conf in KAFKA_CLIENT_CONFIGS.items():
    if not isinstance(_conf, dict) or not all(isinstance(v, (str, int, float, bool)) for v in _conf.values()):
        raise ValueError(f"OFFSETWATCH_KAFKA_CLIENT_CONFIGS[{_cluster!r}] must map librdkafka property names to "
                         "strings or numbers")
# Rows read from one store per pipeline per cycle; the first import of a long history
# continues over the next cycles instead of making one cycle unbounded.
MAX_BATCHES_PER_CYCLE = env_int("OFFSETWATCH_MAX_BATCHES_PER_CYCLE", 5000)
# A batch time further ahead of the collector's clock than this is a named problem of its row,
# not imported (and never the pipeline's read position) until it is no longer in the future.
FUTURE_BATCH_TOLERANCE_S = env_float("OFFSETWATCH_FUTURE_BATCH_TOLERANCE", 3600.0)
# Rows that arrive late (a batch time older than the newest imported: a slow writer, a clock
# step back) are looked for this far behind each pipeline's newest batch at every poll.
LATE_BATCH_WINDOW_S = env_float("OFFSETWATCH_LATE_BATCH_WINDOW", 600.0)
# How often an HBase store is listed for new pipelines (a skip scan over its row keys); polls in
# between read the pipelines already known, so malformed rows are not re-scanned at each poll.
# Other stores list cheaply at every poll; a store with no pipeline yet is listed at every poll.
STORE_DISCOVERY_INTERVAL_S = env_float("OFFSETWATCH_STORE_DISCOVERY_INTERVAL", 60.0)

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
# Lag in seconds from the record at each committed position (exact): at most this many positions
# read per cluster poll (0: interpolation only); budget in the lag-in-seconds block at the end.
RECORD_TIMESTAMP_PARTITIONS = env_int("OFFSETWATCH_RECORD_TIMESTAMP_PARTITIONS", 100_000)

# Rewinds: a request expires if not approved within APPROVAL_TTL, an approval if no job claims it
# within CLAIM_TTL; an applied rewind with no batch seen within VERIFY_TIMEOUT fails.
# Where people reach the dashboard (e.g. https://offsetwatch.example.com): links in notifications.
PUBLIC_URL = env_str("OFFSETWATCH_PUBLIC_URL", "")
REWIND_APPROVAL_TTL_S = env_float("OFFSETWATCH_REWIND_APPROVAL_TTL", 24 * 3600.0)
REWIND_CLAIM_TTL_S = env_float("OFFSETWATCH_REWIND_CLAIM_TTL", 6 * 3600.0)
REWIND_VERIFY_TIMEOUT_S = env_float("OFFSETWATCH_REWIND_VERIFY_TIMEOUT", 3600.0)
# A job's claim is a lease: not followed by `applied` within this long, the pipeline's next start
# (another instance) may take it over, and an approver may cancel it. Longer than a job takes
# from its claim to its `applied` report (a watermark read and one store write).
REWIND_CLAIM_LEASE_S = env_float("OFFSETWATCH_REWIND_CLAIM_LEASE", 60.0)

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

# Notifications (dashboard.alerting): each delivery waits NOTIFY_TIMEOUT_S at most and is retried
# NOTIFY_RETRIES times on transient errors (5xx, timeouts). Channels are configured in the admin.
NOTIFY_TIMEOUT_S = env_float("OFFSETWATCH_NOTIFY_TIMEOUT", 10.0)
NOTIFY_RETRIES = env_int("OFFSETWATCH_NOTIFY_RETRIES", 5)

# On-call alerting (dashboard.alerting; docs/alerting.md). Channels and routes are configured in the
# admin. An incident closes after RESOLVE_AFTER_SAMPLES OK evaluations in a row (a relapse before
# that is the same incident: no flapping); an unacknowledged one is notified again every
# RENOTIFY_AFTER_S (0: never). Pending notifications are swept every NOTIFY_SWEEP_INTERVAL_S and
# retried NOTIFY_RETRIES times, waiting NOTIFY_BACKOFF_S, doubled each time (at most 10 min).
# A pipeline silent for ARCHIVE_AFTER_S whose topic is gone or whose job is retired is archived.
RESOLVE_AFTER_SAMPLES = env_int("OFFSETWATCH_RESOLVE_AFTER_SAMPLES", 3)
RENOTIFY_AFTER_S = env_float("OFFSETWATCH_RENOTIFY_AFTER", 3600.0)
NOTIFY_SWEEP_INTERVAL_S = env_float("OFFSETWATCH_NOTIFY_SWEEP_INTERVAL", 10.0)
NOTIFY_BACKOFF_S = env_float("OFFSETWATCH_NOTIFY_BACKOFF", 5.0)
ARCHIVE_AFTER_S = env_float("OFFSETWATCH_ARCHIVE_AFTER", 7 * 24 * 3600.0)

# The local stack (python manage.py stack / demo): loopback ports and the addresses built on them.
STACK_KAFKA_PORT = env_int("OFFSETWATCH_KAFKA_PORT", 19092)
STACK_HBASE_PORT = env_int("OFFSETWATCH_HBASE_PORT", 19090)
STACK_ZOOKEEPER_PORT = env_int("OFFSETWATCH_ZOOKEEPER_PORT", 12181)
STACK_REDIS_PORT = env_int("OFFSETWATCH_REDIS_PORT", urlparse(REDIS_URL).port or 6379)
KAFKA_BOOTSTRAP = env_str("OFFSETWATCH_KAFKA_BOOTSTRAP", f"127.0.0.1:{STACK_KAFKA_PORT}")
HBASE_URL = env_str("OFFSETWATCH_HBASE_URL", f"hbase://127.0.0.1:{STACK_HBASE_PORT}/stream_kafka_offsets")
ZOOKEEPER_HOSTS = env_str("OFFSETWATCH_ZOOKEEPER_HOSTS", f"127.0.0.1:{STACK_ZOOKEEPER_PORT}")

# JSON lines on stdout in production (one object per record, for log shippers); plain text locally.
LOG_FORMAT = env_str("OFFSETWATCH_LOG_FORMAT", "json" if PRODUCTION else "plain")
if LOG_FORMAT not in {"json", "plain"}:
    raise ValueError(f"OFFSETWATCH_LOG_FORMAT={LOG_FORMAT!r} is not a log format (use json or plain)")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "offsetwatch.lib.jsonlog.JsonFormatter"},
    },
    # JSON to stdout (what container runtimes collect); plain text stays on stderr as it always was.
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "stream": "ext://sys.stdout" if LOG_FORMAT == "json" else "ext://sys.stderr"}},
    "root": {"handlers": ["console"], "level": env_str("OFFSETWATCH_LOG_LEVEL", "INFO")},
    # kaleido and its browser driver log every image at INFO: kept to warnings.
    "loggers": {name: {"level": "WARNING"} for name in ("kaleido", "choreographer", "logistro")},
}

# --- Access: login throttling, response headers, Content-Security-Policy (issue #12: 5 and 7) ---
# Failed logins are counted per (user name, client address) by django-axes: after
# LOGIN_FAILURE_LIMIT failures that pair is refused (429, dashboard/accounts/lockout.py) for LOGIN_COOLOFF
# seconds, restarted by each attempt while refused (0: until an admin unlocks it). Per pair, not per
# user alone, so someone guessing from elsewhere cannot lock the on-call engineer out of his own
# account during an incident, nor one mistyping user a whole office behind one address.
# OFFSETWATCH_PROXY_COUNT: how many proxies in front append to X-Forwarded-For (0: the header is
# never believed, the address is REMOTE_ADDR). Docs: docs/ACCESS.md.
from datetime import timedelta  # noqa: E402

INSTALLED_APPS.append("axes")
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("OFFSETWATCH_LOGIN_FAILURE_LIMIT", 5)
if AXES_FAILURE_LIMIT < 1:
    raise ValueError(f"OFFSETWATCH_LOGIN_FAILURE_LIMIT={AXES_FAILURE_LIMIT} must be at least 1")
_login_cooloff_s = env_int("OFFSETWATCH_LOGIN_COOLOFF", 900)
AXES_COOLOFF_TIME = timedelta(seconds=_login_cooloff_s) if _login_cooloff_s > 0 else None
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True  # a login that succeeds forgets that pair's earlier typos
# axes' own log of successful logins would grow forever with nothing reading it (Django keeps
# each user's last_login); failures live in its attempts, deleted when their cool-off is over.
AXES_DISABLE_ACCESS_LOG = True
AXES_LOCKOUT_CALLABLE = "dashboard.accounts.lockout.lockout_response"
AXES_CLIENT_IP_CALLABLE = "dashboard.accounts.lockout.client_address"
LOGIN_PROXY_COUNT = env_int("OFFSETWATCH_PROXY_COUNT", 0)
# axes logs every attempt at INFO and a banner at start (on stdout, in every command's output):
# kept to its warnings (a failed login, a lockout; names and addresses masked).
AXES_VERBOSE = False
LOGGING["loggers"]["axes"] = {"level": "WARNING"}
# Cache-Control: no-store on every answer that sets no caching of its own (dashboard/web/headers.py):
# pages, the API, /metrics and exports hold data a shared computer or proxy must not keep.
# X-Content-Type-Options: nosniff and Referrer-Policy: same-origin are SecurityMiddleware's
# defaults (SECURE_CONTENT_TYPE_NOSNIFF, SECURE_REFERRER_POLICY); tests/integration/test_headers.py holds them.
# Outside every middleware that may answer by itself (the database's 503 included), inside
# SecurityMiddleware and WhiteNoise (static files keep their own caching).
_headers_at = MIDDLEWARE.index("dashboard.unavailable.DatabaseUnavailableMiddleware")
MIDDLEWARE[_headers_at:_headers_at] = ["csp.middleware.CSPMiddleware", "dashboard.web.headers.NoStoreMiddleware"]
# axes turns a refused login into its answer: last, as its documentation asks.
MIDDLEWARE.append("axes.middleware.AxesMiddleware")
# Scripts only from our own files (no inline script, no eval); the JSON of charts comes by fetch.
# style-src allows 'unsafe-inline' because plotly.js sets style attributes and injects <style>
# rules while drawing (a style cannot run code; scripts stay locked down).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Bounded cost per user (issue #12; docs/BOUNDED_COST.md): no viewer can slow the dashboard for
# everyone. Charts span at most CHART_MAX_SPAN_S (400 beyond); an inline export or chart.json
# holds at most EXPORT_INLINE_MAX_POINTS values (413 with a background export offered beyond);
# a user has at most EXPORT_JOBS_PER_USER background exports queued or running (429 beyond).
# Heavy requests (image renders, cold charts, full exports) take a slot in Redis: at most
# HEAVY_PER_USER per user and HEAVY_GLOBAL in all (429 beyond), below the web workers (3), so
# one worker is always left for light requests; a killed worker's slot expires after
# HEAVY_SLOT_TTL_S; their computation runs at CPU niceness HEAVY_NICE (0: normal). Chart answers are cached in Redis for every worker, within
# CHART_CACHE_MAX_ENTRIES entries and CHART_CACHE_MAX_BYTES bytes.
CHART_MAX_SPAN_S = env_float("OFFSETWATCH_CHART_MAX_SPAN", 30 * 24 * 3600.0)
EXPORT_INLINE_MAX_POINTS = env_int("OFFSETWATCH_EXPORT_INLINE_MAX_POINTS", 500_000)
EXPORT_JOBS_PER_USER = env_int("OFFSETWATCH_EXPORT_JOBS_PER_USER", 3)
HEAVY_PER_USER = env_int("OFFSETWATCH_HEAVY_PER_USER", 1)
HEAVY_GLOBAL = env_int("OFFSETWATCH_HEAVY_GLOBAL", 2)
HEAVY_SLOT_TTL_S = env_float("OFFSETWATCH_HEAVY_SLOT_TTL", 120.0)
HEAVY_NICE = env_int("OFFSETWATCH_HEAVY_NICE", 10)
CHART_CACHE_MAX_ENTRIES = env_int("OFFSETWATCH_CHART_CACHE_MAX_ENTRIES", 1000)
CHART_CACHE_MAX_BYTES = env_int("OFFSETWATCH_CHART_CACHE_MAX_BYTES", 64 * 1024 * 1024)
# --- Store secrets and local store paths (issue #12: docs/SECRETS_AND_NAMES.md) -----------------
# Every console log line goes through a filter masking URL credentials (user:***@, ?password=***).
LOGGING.setdefault("filters", {})["mask_secrets"] = {"()": "offsetwatch.lib.logmask.MaskSecretsFilter"}
LOGGING["handlers"]["console"]["filters"] = ["mask_secrets"]
# The directories file:// and checkpoint:// stores may be under (absolute paths separated by ":"
# or ","). Empty (the default): the admin refuses such stores, since they read and write the
# dashboard host's own disk. A relative path fails at startup.
from streamoffsets.urls import file_roots_from_setting  # noqa: E402 (pure; kept with its setting)

FILE_STORE_ROOTS = file_roots_from_setting(env_str("OFFSETWATCH_FILE_STORE_ROOTS", ""))
# Input validation (issue #12): every error under /api/ is JSON, whoever made it (Django's 404 or
# 413, a middleware's 403 or 429, handler500): outermost, so it sees every answer.
MIDDLEWARE.insert(0, "dashboard.api.errors.ApiJsonErrorsMiddleware")
# Issue #13 (numbers right on real platforms): a cluster's poll waits, at most this many
# seconds, until its stores' polls of the cycle (queued or running) are done, so it evaluates on
# the offsets they just wrote; a store slower than this is evaluated on its previous offsets and
# does not hold the cluster's poll longer (a quarter interval at most: the cadence is kept).
CLUSTER_WAIT_FOR_STORES_S = env_float("OFFSETWATCH_CLUSTER_WAIT_FOR_STORES",
                                      min(2.0, POLL_INTERVAL_S / 4, IO_TIMEOUT_S))
# Issue #16: a cluster whose poll evaluates more partitions than this (each tracked topic's
# partitions once per pipeline reading it: the evaluation is most of a poll's time) is polled
# (watermarks read, lag sampled, pipelines evaluated) as several shards of its topics, each its
# own task, lock, backoff and health row, so worker processes share one large cluster. 20,000
# (docs/scaling.md): a poll of 50,000 took 1.5-5 s on this 2-core machine when quiet and 15-21 s
# when shared, so a shard stays well under the 10 s interval even then; each shard also costs a
# fixed share (a Kafka client's metadata, a few queries, a lock), and at 100,000 positions shards
# of 20,000 gave cycles of 6.7-7.6 s on 2 processes where 10,000 gave 10.4-10.6 s. A cluster of
# that size or smaller stays one poll, exactly as before. 0 turns it off.
CLUSTER_SHARD_PARTITIONS = env_int("OFFSETWATCH_CLUSTER_SHARD_PARTITIONS", 20_000)
# --- Lag in seconds from every group's own record (issue #13: docs/LAG_SECONDS.md) -------------
# The record reads of one cluster poll may take BASE + PER_POSITION ms per position read, at most
# MAX seconds; positions left unread are read first the next cycle.
RECORD_TIMESTAMP_BUDGET_BASE_S = env_float("OFFSETWATCH_RECORD_TIMESTAMP_BUDGET_BASE", 2.0)
RECORD_TIMESTAMP_BUDGET_PER_POSITION_MS = env_float("OFFSETWATCH_RECORD_TIMESTAMP_BUDGET_PER_POSITION", 0.5)
RECORD_TIMESTAMP_BUDGET_MAX_S = env_float("OFFSETWATCH_RECORD_TIMESTAMP_BUDGET_MAX", max(5.0, POLL_SOFT_TIME_LIMIT_S / 3))
