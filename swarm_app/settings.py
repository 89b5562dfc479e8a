"""Settings for the Swarm coordinator, read from the environment. The module is long because it
is the one place where every setting is declared, documented below and checked as it is read.

One module serves both modes:

* **Embedded** (no ``REDIS_URL``): SQLite in the data directory, a channel layer and a
  Celery broker that need no server (files under the data directory), so one machine runs
  everything with nothing installed but Python packages.
* **Production** (``DATABASE_URL`` and ``REDIS_URL``): PostgreSQL, channels-redis and Celery
  on Redis; several ASGI servers and Celery workers can share them.

Environment variables (see platform/.env.example):
    SWARM_DATA_DIR   data directory: SQLite file, broker files, model cache, checkpoints (default ./data)
    DATABASE_URL     e.g. postgres://swarm:pw@db:5432/swarm (default: SQLite in SWARM_DATA_DIR)
    REDIS_URL        e.g. redis://redis:6379/0 (default: embedded channel layer and broker)
    SECRET_KEY       required when DEBUG is off and DATABASE_URL names a server; embedded mode keeps
                     a generated key in the data directory. In production (REDIS_URL set) with DEBUG
                     off, a key shorter than 50 characters, with fewer than 5 distinct characters,
                     or equal to platform/.env.example's placeholder is refused (ImproperlyConfigured)
    DEBUG            1/0 (default 0)
    ALLOWED_HOSTS    comma-separated (default: localhost names)
    CSRF_TRUSTED_ORIGINS  comma-separated origins, for a coordinator behind a TLS proxy
    SERVE_STATIC     1/0: the ASGI app serves /static/ itself (default 1 in embedded mode)
    SECURE_COOKIES   1/0: session and CSRF cookies only over HTTPS (default 1 in production, 0 in
                     embedded mode; tests and the demo, plain http on loopback, set 0)
    SECURE_SSL_REDIRECT  1/0: answer plain-http requests (except /healthz) with a redirect to https
                     (default 0; platform/.env.example sets 1)
    SECURE_HSTS_SECONDS  Strict-Transport-Security max-age, sent on https responses (default one
                     year in production, 0 in embedded mode), with includeSubDomains
                     (SECURE_HSTS_INCLUDE_SUBDOMAINS, default 1 in production); SECURE_HSTS_PRELOAD
                     1/0 adds "preload" (default 0)
    EMAIL_HOST       SMTP server; set, it turns password reset on (/accounts/password_reset/);
                     unset, password reset is not routed. EMAIL_PORT, EMAIL_HOST_USER,
                     EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL, DEFAULT_FROM_EMAIL
    LOGIN_FAILURE_LIMIT  wrong passwords from one client address within LOGIN_LOCKOUT_SECONDS
                     that lock that address out of both logins (django-axes; default 50)
    LOGIN_LOCKOUT_SECONDS  the window and the lockout's length (default 900)
    SWARM_ALLOW_LOCAL_WORKERS  1/0: the campaign form may start worker processes on this machine
                     (the demo sets it; default 0)
    SWARM_CONTROL_URL  the coordinator's address as the isolated controls' nodes reach it from
                     the Celery workers of the `controls` queue (default: SWARM_PUBLIC_URL, else
                     http://127.0.0.1:8000/)
    SWARM_CONTROL_PYTHON  the Python that runs the isolated controls' nodes (`python -m
                     worker.cli join`; it needs the `worker` extra: torch, transformers);
                     default: the Celery worker's own Python
    SWARM_CONTROL_DATA_DIR  the controls' nodes' data directories (identity, checkpoints): a
                     directory every machine serving the `controls` queue shares (default
                     <SWARM_DATA_DIR>/controls)
    SWARM_CONTROL_MAX_STARTS  a control whose node exits early this many times fails (default 5)
    HEALTH_HEARTBEAT_SECONDS  how often beat sends the housekeeping heartbeat; /healthz/all says
                     beat or the Celery worker is down after 3 periods + 10 s without it (default 30)
    SWARM_CONTROL_SLOTS  threads of each `controls` queue worker (the shipped start commands pass it
                     as --concurrency): controls that run at once (default 16; `check --deploy`
                     warns below what the campaign form's default or a preset starts)
    SWARM_TRAINING_NICE  the niceness of every training process the coordinator, its Celery
                     workers or the demo start (default 10: below the coordinator's servers)
    DB_POOL          1/0: a psycopg connection pool per process on PostgreSQL (default 1);
                     DB_POOL_MIN, DB_POOL_MAX size it
    SWARM_BENCH_ECHO 1/0: serve the bare websocket echo /ws/echo/, the baseline of
                     bench/coordinator.py (which sets it for the servers it starts; default 0)
    METRICS_ALLOWED_ADDRESSES  comma-separated addresses or networks (CIDR) whose requests
                     /metrics answers (default 127.0.0.1,::1); requests through the proxy
                     (X-Forwarded-For, Forwarded or X-Real-IP present) are always refused. A
                     network that covers every address needs METRICS_TOKEN or METRICS_TOKEN_FILE
    METRICS_TOKEN    set: /metrics also needs "Authorization: Bearer <token>" (32+ characters)
    METRICS_TOKEN_FILE  instead of METRICS_TOKEN: a file holding the token, read at each scrape
                     (the file platform/prometheus.yml's credentials_file names, on Prometheus's
                     host; `check --deploy` reports it missing or short)
    POOL_ARCHIVE_SECONDS  how often Celery beat moves rollouts no draw can reach out of the hot
                     pool table (swarm_app/coordinator/archive.py; default 300)
    POOL_ARCHIVE_GRACE_SECONDS  a rollout stays in the hot table at least this long, whatever the
                     window (its node's metrics report reads it; default 3600)
    POOL_SAMPLING    where a round's draw from the pool runs: `inline` in the ASGI server that holds
                     the node's socket (default), or `celery`: the Celery task
                     `coordinator.sample_pool` on the default queue (docs/deploy.md, "Pool
                     sampling: inline or on Celery")
    SWARM_PUBLIC_URL the coordinator's address as volunteers reach it (http(s)://host[:port]/),
                     in the join command of the campaign and token pages and the /join.sh script
                     (default unset: the address being browsed, with a warning)
    SWARM_VOLUNTEER_SIGNUP  1/0: anyone may sign up at /accounts/signup/ and make their own worker
                     tokens for open campaigns (default 1; swarm_app/volunteers/, docs/volunteers.md)
    SIGNUP_LIMIT     sign-up forms one client address may send within SIGNUP_WINDOW_SECONDS
                     (default 10); SIGNUP_WINDOW_SECONDS (default 3600)
    PROMETHEUS_MULTIPROC_DIR  prometheus_client's multiprocess mode: a directory (created if
                     missing) where every process of the host keeps its counts, so that a scrape of
                     any of them reports all; one per host (PID namespace), set before the processes
                     start (default unset: each process reports its own)
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected 1/0, true/false, yes/no or on/off")


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name, "")
    return [item.strip() for item in value.split(",") if item.strip()] or default


BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("SWARM_DATA_DIR") or BASE_DIR / "data").resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not REDIS_URL

DEBUG = env_bool("DEBUG", False)


# platform/.env.example's placeholder (tests/core/test_security_settings.py keeps the two equal).
EXAMPLE_SECRET_KEY = "CHANGE_ME"


def _weak_secret_key(key: str) -> str | None:
    """Why ``key`` is too weak for production, or None. Django's own deploy check (security.W009)
    asks the same of length and variety; here a weak key stops the process instead of warning."""
    if key == EXAMPLE_SECRET_KEY:
        return "it is platform/.env.example's placeholder"
    if len(key) < 50:
        return f"it has {len(key)} characters, fewer than 50"
    if len(set(key)) < 5:
        return "it has fewer than 5 distinct characters"
    if key.startswith("django-insecure-"):
        return "it is one of Django's startproject development keys"
    return None


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "")
    if key:
        # Production (REDIS_URL set: the servers face the network) refuses a weak key; embedded
        # mode (a laptop, the demo, tests without Redis) and DEBUG=1 accept any key.
        weakness = _weak_secret_key(key) if not EMBEDDED and not DEBUG else None
        if weakness:
            raise ImproperlyConfigured(
                f"SECRET_KEY is refused in production: {weakness}. Generate one with: "
                'python3 -c "import secrets; print(secrets.token_urlsafe(50))"'
            )
        return key
    if DATABASE_URL and not DATABASE_URL.startswith("sqlite") and not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DATABASE_URL names a server and DEBUG is off."
        )
    # Embedded mode: a key generated once and kept beside the database, so sessions survive restarts.
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


def public_url(value: str) -> str:
    """SWARM_PUBLIC_URL, checked: an http(s) address with a host and no query, as "<origin>/"
    ("" when unset). A volunteer's join line is built from it, never from a request's Host."""
    from urllib.parse import urlsplit

    value = value.strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ImproperlyConfigured(
            f"SWARM_PUBLIC_URL={value!r}: expected the coordinator's public address, e.g. https://swarm.example/"
        )
    return value.rstrip("/") + "/"


SECRET_KEY = _secret_key()
SWARM_PUBLIC_URL = public_url(os.environ.get("SWARM_PUBLIC_URL", ""))
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
SERVE_STATIC = env_bool("SERVE_STATIC", EMBEDDED or DEBUG)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "channels",
    "swarm_app.core",
    "swarm_app.campaigns",
    "swarm_app.coordinator",
    "swarm_app.runs",
    "swarm_app.web",
    "swarm_app.demo",
    "swarm_app.volunteers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: turns a locked-out login into its 429 page (sync and async).
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy (django-csp): the pages load only this site's own scripts, styles and
# sockets; no inline script runs (page data travels in <script type="application/json">).
# Inline styles stay allowed: plotly.js styles its charts with injected <style> elements.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, "'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

ROOT_URLCONF = "swarm_app.urls"
ASGI_APPLICATION = "swarm_app.asgi.application"

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
                "swarm_app.volunteers.context.signup",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL or f"sqlite:///{DATA_DIR / 'swarm.sqlite3'}",
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool("DB_POOL", True):
    # Under ASGI Django advises pooling over persistent connections: a psycopg pool per process
    # saves a PostgreSQL handshake (~10 ms) on every websocket request.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": int(os.environ.get("DB_POOL_MIN", "1")),
        "max_size": int(os.environ.get("DB_POOL_MAX", "8")),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # The coordinator's hot statements are prepared (swarm_app/coordinator/sql.py): plan them
    # once, generically. A custom plan built from a new campaign's id trusts statistics that
    # have not seen the campaign yet (~1 row) and picks the wrong index. Django's own queries
    # are not prepared; this changes nothing for them.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = f"{_options.get('options', '')} -c plan_cache_mode=force_generic_plan".strip()
    # Django turns prepared statements off (psycopg's prepare_threshold=None), and psycopg then
    # ignores sql.py's prepare=True: each hot statement was parsed and planned on every execution,
    # about a third of PostgreSQL's CPU per round (docs/coordinator-bench.md). psycopg's default
    # threshold touches only server-binding cursors, which are sql.py's alone; the ORM's
    # client-binding cursors never prepare.
    _options.setdefault("prepare_threshold", 5)
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _sqlite_path = Path(DATABASES["default"]["NAME"])
    DATABASES["default"]["OPTIONS"] = {
        # The ASGI server and the Celery worker write from separate processes: WAL lets readers
        # run beside one writer, and IMMEDIATE transactions queue writers instead of failing
        # with "database is locked" when a read transaction upgrades to a write.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    # A file, not :memory:, so that servers the tests start in other processes see the test data.
    DATABASES["default"]["TEST"] = {"NAME": str(_sqlite_path.with_name(f"test-{_sqlite_path.name}"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channel layer and Celery ---------------------------------------------------------------
if EMBEDDED:
    # Reaches consumers of every process on this machine (the Celery worker's controls push to
    # dashboards served by the ASGI process); see swarm_app/core/channel_layer.py.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "swarm_app.core.channel_layer.SQLiteChannelLayer",
            "CONFIG": {"path": str(DATA_DIR / "channels.sqlite3")},
        }
    }
    _broker_dir = DATA_DIR / "celery" / "broker"
    _broker_dir.mkdir(parents=True, exist_ok=True)
    # The host means nothing to the filesystem transport; naming one keeps kombu from warning
    # "No hostname was supplied" in every process that sends a task.
    # swarmfs: kombu's filesystem transport with messages renamed into place whole
    # (swarm_app/core/file_broker.py: the stock one lets a consumer read a half-written file).
    CELERY_BROKER_URL = "swarmfs://localhost/"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "store_processed": False,
        # exchange tables (celery control, beat); kombu's default is ./control in the cwd
        "control_folder": str(DATA_DIR / "celery" / "control"),
    }
    CELERY_RESULT_BACKEND = f"file://{(DATA_DIR / 'celery' / 'results').as_posix()}"
    (DATA_DIR / "celery" / "results").mkdir(parents=True, exist_ok=True)
else:
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis, waiting out a Redis outage instead of closing sockets, with group
            # memberships restored when Redis is back (swarm_app/core/redis_layer.py).
            "BACKEND": "swarm_app.core.redis_layer.ResilientRedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout by default, exactly channels-redis's 5 s
            # blocking wait for the next message (BZPOPMIN): an idle consumer's read could time
            # out first and close its websocket with 1011 (seen in the coordinator bench, and a
            # dashboard that lost its socket this way missed live points). The read timeout
            # must outlast the wait.
            "CONFIG": {
                # At most max_concurrent operations at once (the layer queues the rest); the
                # pool holds those, the receive loop's connection and some headroom. A connect
                # timeout keeps an unreachable Redis from stalling a hello.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": 15,
                        "socket_connect_timeout": 2,
                        "max_connections": 96,
                    }
                ],
                "max_concurrent": 64,
                "capacity": 1000,
                "expiry": 60,
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL

CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Isolated controls are worker nodes that Celery starts (swarm_app/runs/controls.py).
CONTROL_URL = (
    os.environ.get("SWARM_CONTROL_URL") or os.environ.get("SWARM_PUBLIC_URL") or "http://127.0.0.1:8000/"
)
CONTROL_DATA_DIR = Path(os.environ.get("SWARM_CONTROL_DATA_DIR") or DATA_DIR / "controls")
CONTROL_MAX_STARTS = int(os.environ.get("SWARM_CONTROL_MAX_STARTS", "5"))
CONTROL_SLOTS = int(os.environ.get("SWARM_CONTROL_SLOTS", "16"))
if CONTROL_SLOTS < 1:
    raise ImproperlyConfigured(f"SWARM_CONTROL_SLOTS={CONTROL_SLOTS}: expected 1 or more")
TRAINING_NICE = int(os.environ.get("SWARM_TRAINING_NICE", "10"))
if not 0 <= TRAINING_NICE <= 19:
    raise ImproperlyConfigured(f"SWARM_TRAINING_NICE={TRAINING_NICE}: expected 0..19")


def control_python(value: str) -> str:
    """SWARM_CONTROL_PYTHON, checked: an executable file (the controls' training processes run
    there, so the coordinator's own environment needs no torch)."""
    if not value:
        return sys.executable
    if not (os.path.isfile(value) and os.access(value, os.X_OK)):
        raise ImproperlyConfigured(
            f"SWARM_CONTROL_PYTHON={value!r}: expected the path of a Python executable that has "
            "swarm-sapo[worker] installed"
        )
    return value


CONTROL_PYTHON = control_python(os.environ.get("SWARM_CONTROL_PYTHON", ""))


def env_seconds(name: str, default: float, minimum: float) -> float:
    value = os.environ.get(name) or str(default)
    try:
        seconds = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a number of seconds") from None
    if not minimum <= seconds < float("inf"):
        raise ImproperlyConfigured(f"{name}={value!r}: expected at least {minimum:g} seconds")
    return seconds


# Bounded storage (swarm_app/coordinator/archive.py): how often beat moves the rollouts no draw
# can reach out of the hot pool table, and how long every rollout stays there at least.
POOL_ARCHIVE_SECONDS = env_seconds("POOL_ARCHIVE_SECONDS", 300, 1)
POOL_ARCHIVE_GRACE_SECONDS = env_seconds("POOL_ARCHIVE_GRACE_SECONDS", 3600, 0)

# A control's task holds a slot of its Celery worker for the whole campaign: controls have a
# queue of their own, served by Celery workers of their own (docs/deploy.md), and beat's
# housekeeping keeps the default queue to itself.
CELERY_TASK_ROUTES = {"campaigns.run_control": {"queue": "controls"}}

# The housekeeping heartbeat (swarm_app/core/health.py): beat sends it this often; /healthz/all
# reports beat or the default queue's workers down after three periods (plus 10 s) without it.
HEALTH_HEARTBEAT_SECONDS = env_seconds("HEALTH_HEARTBEAT_SECONDS", 30, 1)

CELERY_BEAT_SCHEDULE = {
    "heartbeat": {
        "task": "core.heartbeat",
        "schedule": HEALTH_HEARTBEAT_SECONDS,
        "options": {"expires": HEALTH_HEARTBEAT_SECONDS},
    },
    "update-liveness": {"task": "coordinator.update_liveness", "schedule": 10.0},
    # Housekeeping that a busy worker runs late is dropped rather than run in a pile (expires).
    "requeue-offline-controls": {
        "task": "campaigns.requeue_offline_controls",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    "complete-finished-campaigns": {
        "task": "campaigns.complete_finished",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    # Keeps the dashboard rollups current, so a first page view reads them instead of raw rows.
    "archive-pool": {
        "task": "coordinator.archive_pool",
        "schedule": POOL_ARCHIVE_SECONDS,
        "options": {"expires": POOL_ARCHIVE_SECONDS},
    },
    "refresh-dashboards": {
        "task": "campaigns.refresh_dashboards",
        "schedule": 5.0,
        "options": {"expires": 5.0},
    },
}

# --- Coordinator ----------------------------------------------------------------------------
# Where pool sampling runs: "inline" in the ASGI server (lowest latency) or "celery"
# (docs/deploy.md, "Pool sampling: inline or on Celery").
POOL_SAMPLING = os.environ.get("POOL_SAMPLING", "inline")
if POOL_SAMPLING not in ("inline", "celery"):
    raise ImproperlyConfigured(f"POOL_SAMPLING={POOL_SAMPLING!r}: expected inline or celery")
WORKER_RATE_PER_SECOND = float(os.environ.get("WORKER_RATE_PER_SECOND", "20"))
WORKER_RATE_BURST = float(os.environ.get("WORKER_RATE_BURST", "60"))
# A worker socket that has not said hello this many seconds after connecting is closed (4000).
WORKER_HELLO_SECONDS = float(os.environ.get("WORKER_HELLO_SECONDS", "10"))
# Past this many database calls in flight per database thread, lease, submit, sample and metrics
# requests are answered `busy` with a retry_after (backpressure instead of timeouts).
WORKER_BUSY_QUEUE_PER_THREAD = int(os.environ.get("WORKER_BUSY_QUEUE_PER_THREAD", "8"))
# ... and while the process's event loop runs a timer this many milliseconds late (0: never;
# swarm_app/coordinator/admission.py).
WORKER_BUSY_LOOP_LAG_MS = float(os.environ.get("WORKER_BUSY_LOOP_LAG_MS", "0"))
# The campaign form may start N `swarm-worker join` processes on this machine (demo coordinators;
# off by default: a public coordinator must not run training jobs for whoever is staff).
SWARM_ALLOW_LOCAL_WORKERS = env_bool("SWARM_ALLOW_LOCAL_WORKERS", False)
# The bare websocket echo (swarm_app/core/consumers.py) exists only for benchmarks: anyone could
# use it to make the server buffer and send megabytes.
SWARM_BENCH_ECHO = env_bool("SWARM_BENCH_ECHO", False)


# --- Metrics (/metrics, swarm_app/coordinator/scrape.py; docs/deploy.md "Metrics") ----------
def _metrics_addresses() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for item in env_list("METRICS_ALLOWED_ADDRESSES", ["127.0.0.1", "::1"]):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"METRICS_ALLOWED_ADDRESSES: {item!r} is not an address or a network (CIDR)"
            ) from None
    return networks


METRICS_ALLOWED_ADDRESSES = _metrics_addresses()
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
if METRICS_TOKEN and (len(METRICS_TOKEN) < 32 or METRICS_TOKEN == EXAMPLE_SECRET_KEY or " " in METRICS_TOKEN):
    raise ImproperlyConfigured(
        "METRICS_TOKEN must be 32 or more characters without spaces; generate one with: "
        'python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
    )
METRICS_TOKEN_FILE = os.environ.get("METRICS_TOKEN_FILE", "")
if METRICS_TOKEN and METRICS_TOKEN_FILE:
    raise ImproperlyConfigured("set METRICS_TOKEN or METRICS_TOKEN_FILE, not both")
if not (METRICS_TOKEN or METRICS_TOKEN_FILE) and any(
    network.prefixlen == 0 for network in METRICS_ALLOWED_ADDRESSES
):
    raise ImproperlyConfigured(
        "METRICS_ALLOWED_ADDRESSES covers every address: set METRICS_TOKEN (or METRICS_TOKEN_FILE) "
        "too, or name the scraper's address or network"
    )
# Read by prometheus_client itself when it is imported (swarm_app/coordinator/telemetry.py);
# checked here so that a wrong path stops the process at start, not at its first count.
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
if not PROMETHEUS_MULTIPROC_DIR:
    # Set but empty would still switch prometheus_client to multiprocess mode (it tests for the
    # name), with its files in the working directory.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
else:
    try:
        Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ImproperlyConfigured(
            f"PROMETHEUS_MULTIPROC_DIR={PROMETHEUS_MULTIPROC_DIR!r}: {error}"
        ) from None
    if not os.access(PROMETHEUS_MULTIPROC_DIR, os.W_OK | os.X_OK):
        raise ImproperlyConfigured(f"PROMETHEUS_MULTIPROC_DIR={PROMETHEUS_MULTIPROC_DIR!r} is not writable")

# --- Auth, i18n, static ---------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes, for the site's login and the admin's, which both call
# authenticate() with the request). Failures are kept in the database (axes' database handler):
# the one store every daphne process and host shares in both modes (SQLite embedded, PostgreSQL
# in production); Django's cache here is per process (local memory), so a cache handler would
# let each process count on its own. Counted per client address (daphne --proxy-headers takes it
# from nginx's X-Forwarded-For): the LOGIN_FAILURE_LIMIT-th wrong password within the window is
# answered 429 and every attempt from that address after it (the right password included, not
# checked) until LOGIN_LOCKOUT_SECONDS after that failure. Attempts during a lockout are not
# recorded (their rows stay bounded and the lockout does not grow); successful logins are not
# logged (no record of who logs in from where). See docs/deploy.md.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "50"))
AXES_COOLOFF_TIME = timedelta(seconds=float(os.environ.get("LOGIN_LOCKOUT_SECONDS", "900")))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
AXES_RESET_ON_SUCCESS = False
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_DISABLE_ACCESS_LOG = True
AXES_LOCKOUT_TEMPLATE = "registration/lockout.html"

# Volunteers (swarm_app/volunteers/): self-service sign-up, on by default; its forms are
# throttled per client address in the database (volunteers/accounts.py says why not the cache).
SWARM_VOLUNTEER_SIGNUP = env_bool("SWARM_VOLUNTEER_SIGNUP", True)
SIGNUP_LIMIT = int(os.environ.get("SIGNUP_LIMIT", "10"))
SIGNUP_WINDOW_SECONDS = env_seconds("SIGNUP_WINDOW_SECONDS", 3600, 1)

LOGIN_URL = "/accounts/login/"
# The header's links send ?next=<this page>; without one, login and logout land on the home page.
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or DATA_DIR / "staticfiles")

# Behind a TLS-terminating proxy (platform/nginx.conf sets X-Forwarded-Proto).
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not EMBEDDED)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# nginx redirects port 80 itself; this covers a server reached without it (a Heroku-style
# router). /healthz stays reachable over plain http for the compose and local health checks, and
# /metrics for a scraper on the private network (it never answers through the proxy).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^healthz/all$", r"^metrics$"]
# HSTS on https responses (Django sends it only on requests it sees as secure; nginx.conf sends
# the same header for what it serves itself).
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0" if EMBEDDED else "31536000"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not EMBEDDED)
# "preload" lets anyone submit the host to the browsers' built-in HSTS lists, which take months
# to leave: the operator's commitment to make (SECURE_HSTS_PRELOAD=1), not a default. Its deploy
# warning (security.W021) is silenced for that reason only.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = ["security.W021"]

# Mail: only for password reset, routed only when EMAIL_HOST is set (swarm_app/urls.py);
# without mail a reset request would only fail on an SMTP connection.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
PASSWORD_RESET_ENABLED = bool(EMAIL_HOST)
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_SSL:
    EMAIL_USE_TLS = False  # Django refuses both at once
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "webmaster@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # axes: a WARNING per failed login and lockout; its INFO lines (start-up banner, every
    # login and logout) are left out.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
