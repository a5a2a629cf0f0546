"""paiweb settings: one module, read from environment variables.

With nothing set it runs on SQLite and the embedded Redis that `make demo` starts
(a unix socket under var/). DATABASE_URL and REDIS_URL switch to PostgreSQL and a
real Redis. `.env.example` lists every variable.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from celery.schedules import schedule
from django.utils.csp import CSP

from paiweb.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    redis_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PAIWEB_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)  # SQLite, the embedded Redis, pod work dirs

from paiweb.secret_key import env_secret  # noqa: E402

# DEBUG is off unless the environment turns it on, but for three development entry points
# when DEBUG is unset: `manage.py demo` (it hands DEBUG=true on to its children and its banner
# says so), `manage.py simulate` (offline: no server, no database) and a pytest run (pytest
# sets PYTEST_VERSION for its session and the demos, agents and commands the tests start
# inherit it; pytest-django still runs each test with DEBUG False).
_DEVELOPMENT = bool(os.environ.get("PYTEST_VERSION")) or (
    Path(sys.argv[0]).name == "manage.py" and sys.argv[1:2] in (["demo"], ["simulate"])
)
DEBUG = env_bool("DEBUG", _DEVELOPMENT)
# Outside DEBUG every process refuses to start without a real SECRET_KEY (unset, empty or the
# old public default: ImproperlyConfigured). In DEBUG an unset one is this installation's
# random key, generated once in VAR_DIR/secret-key (mode 0600): never a public value.
SECRET_KEY = env_secret("SECRET_KEY", debug=DEBUG, var_dir=VAR_DIR)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# HTTPS, for a deployment behind a TLS-terminating proxy (docker compose: deploy/nginx/; its
# settings pass `manage.py check --deploy`). All off by default, for plain-http development.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# The health probe answers over plain http too: compose's healthchecks call gunicorn directly.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Content-Security-Policy on every response: scripts only from this site's files (no inline
# script, no event-handler attribute, no eval: htmx's filters and hx-on cannot run either),
# so a string that ever slipped past escaping could not run. Styles may be inline (style
# attributes, htmx's indicator style); frames, plugins and foreign form targets are refused.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
# "HTTP_X_FORWARDED_PROTO,https": the header (as Django names it) and the value by which the
# proxy says the client used https. Only behind a proxy that always sets it (or strips it).
_proxy_ssl_header = env_list("SECURE_PROXY_SSL_HEADER", [])
if _proxy_ssl_header and (
    len(_proxy_ssl_header) != 2 or not _proxy_ssl_header[0].startswith("HTTP_")
):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "SECURE_PROXY_SSL_HEADER: expected HEADER,VALUE with the header as Django names it, "
        f"e.g. HTTP_X_FORWARDED_PROTO,https; got {os.environ['SECURE_PROXY_SSL_HEADER']!r}"
    )
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header) or None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "apps.core",
    "apps.workspaces",
    "apps.cluster",
    "apps.jobs",
    "apps.scheduler",
    "apps.simulator",
    "apps.market",
    "apps.billing",
    "apps.api",
    "apps.agent",
    "apps.console",
    "apps.whatif",
    "apps.ops",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "apps.core.middleware.RefuseNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.core.middleware.HtmxLoginRedirectMiddleware",
    "apps.core.middleware.MethodNotAllowedPageMiddleware",
    "apps.workspaces.middleware.CurrentWorkspaceMiddleware",
    "apps.workspaces.middleware.TimezoneMiddleware",
    "apps.workspaces.middleware.LanguageMiddleware",
]

ROOT_URLCONF = "paiweb.urls"
WSGI_APPLICATION = "paiweb.wsgi.application"

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
                "apps.workspaces.context_processors.workspaces",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'paiweb.sqlite3'}")
DATABASES = {"default": database_from_url(DATABASE_URL)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several processes (web, worker, beat) share one file: wait for locks, write-ahead log.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # The test database is a file, not memory, so that tests can run a real node agent (a
    # worker subprocess) on it: one file per test run, named by PAIWEB_TEST_DB_NAME if set.
    _test_db = Path(tempfile.gettempdir()) / f"paiweb-test-{os.getpid()}.sqlite3"
    DATABASES["default"]["TEST"] = {"NAME": env_str("PAIWEB_TEST_DB_NAME", str(_test_db))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: a real server by URL, or the embedded one on a unix socket under var/.
EMBEDDED_REDIS_SOCKET = VAR_DIR / "redis" / "redis.sock"
REDIS_URL = redis_url(env_str("REDIS_URL", f"unix://{EMBEDDED_REDIS_SOCKET}"))

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "jobs:list"
LOGOUT_REDIRECT_URL = "login"

# --- Throttling of failed sign-ins and bad AccessKey signatures (apps/core/throttle.py) ---
# Failures are counted in Redis (REDIS_URL: shared by every web process, kept across
# restarts) over a sliding window; a scope at its limit waits until its oldest failure in the
# window is THROTTLE_WINDOW_SECONDS old (docs/operations.md, docs/api.md). Every sign-in form
# (console and admin) goes through this backend.
AUTHENTICATION_BACKENDS = ["apps.core.auth.ThrottledModelBackend"]
THROTTLE_WINDOW_SECONDS = env_int("THROTTLE_WINDOW_SECONDS", 900, minimum=1)
LOGIN_THROTTLE_PER_USERNAME = env_int("LOGIN_THROTTLE_PER_USERNAME", 5, minimum=1)
LOGIN_THROTTLE_PER_ADDRESS = env_int("LOGIN_THROTTLE_PER_ADDRESS", 20, minimum=1)
API_THROTTLE_PER_KEY_ADDRESS = env_int("API_THROTTLE_PER_KEY_ADDRESS", 10, minimum=1)
API_THROTTLE_PER_ADDRESS = env_int("API_THROTTLE_PER_ADDRESS", 30, minimum=1)
API_THROTTLE_PER_KEY = env_int("API_THROTTLE_PER_KEY", 100, minimum=1)
THROTTLE_KEY_PREFIX = "throttle:"  # Redis keys; the tests use one prefix per test
# The client address the throttles count against: REMOTE_ADDR, or behind N proxies that each
# append to X-Forwarded-For (compose's nginx: 1), the N-th entry from its right. 0: no proxy
# (X-Forwarded-For is ignored: a client could write anything there).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0)
# --- end of throttling ---------------------------------------------------------------------

# The console speaks English and Simplified Chinese: the user's saved choice, else the
# browser's Accept-Language (LocaleMiddleware). The catalogues under locale/ are compiled at
# install (`manage.py compile_translations`); the API's codes stay English.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "UTC")
try:
    import zoneinfo

    zoneinfo.ZoneInfo(TIME_ZONE)
except (ValueError, zoneinfo.ZoneInfoNotFoundError):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"TIME_ZONE: not a time zone name, e.g. UTC or Asia/Shanghai: {TIME_ZONE!r}"
    ) from None
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Nothing is uploaded; set so that a test live server never serves the working directory.
MEDIA_URL = "/media/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise expects it; `collectstatic` fills it for production
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Root log level, in any case: DEBUG, INFO, WARNING, ERROR or CRITICAL.
LOG_LEVEL = env_str("LOG_LEVEL", "INFO").strip().upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"LOG_LEVEL: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, "
        f"got {os.environ['LOG_LEVEL']!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Django's own console handler (DEBUG only) would print its records a second time on
    # their way to the root: they go through the root's handler alone.
    "loggers": {"django": {"handlers": [], "propagate": True}},
}


# --- Celery ------------------------------------------------------------------------------
def _celery_url(url: str) -> str:
    return "redis+socket://" + url.removeprefix("unix://") if url.startswith("unix://") else url


CELERY_BROKER_URL = _celery_url(REDIS_URL)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A Redis that takes connections but does not answer (frozen, swapping, a network that drops
# packets) fails a message within seconds, as `redis_client` does: without a socket timeout a
# send blocked for as long as it lasted, and with it the web request that sent it.
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 5, "socket_connect_timeout": 2}
# No retries of a send: each waited out the socket timeout again (3 of them made a stop wait
# 25 s), and every message is a hint that a sweep stands in for. (A pooled connection that a
# Redis restart closed is reconnected within the send.)
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 0,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_TIMEZONE = TIME_ZONE

HEARTBEAT_INTERVAL = env_float("HEARTBEAT_INTERVAL", 10.0, minimum=0.5)
# The health panel turns red for work (a pod start, a job's admission) waiting longer.
HEALTH_BEHIND_SECONDS = env_float("HEALTH_BEHIND_SECONDS", 60.0, minimum=5.0)
SCHEDULER_TICK_INTERVAL = env_float("SCHEDULER_TICK_INTERVAL", 2.0, minimum=0.1)
# A borrower younger than this is not preempted yet; a requeued job waits this long.
SCHEDULER_MIN_RUN_SECONDS = env_float("SCHEDULER_MIN_RUN_SECONDS", 60.0)
SCHEDULER_REQUEUE_BACKOFF_SECONDS = env_float("SCHEDULER_REQUEUE_BACKOFF_SECONDS", 10.0)
# Where quota pods go: "best_fit" (the node left with the least room) or "fgd", the
# fragmentation-aware placement of FGD (USENIX ATC'23): each pod on the node and GPU whose
# fragmentation grows least against the mix of pods submitted in the last
# SCHEDULER_WORKLOAD_HOURS (docs/operations.md, "Placement").
SCHEDULER_PLACEMENT = env_str("SCHEDULER_PLACEMENT", "best_fit")
if SCHEDULER_PLACEMENT not in {"best_fit", "fgd"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"SCHEDULER_PLACEMENT: expected best_fit or fgd, got {SCHEDULER_PLACEMENT!r}"
    )
SCHEDULER_WORKLOAD_HOURS = env_float("SCHEDULER_WORKLOAD_HOURS", 168.0, minimum=0.01)
# The spot market moves prices every MARKET_STEP_INTERVAL seconds (seeded by MARKET_SEED when
# set, for reproducible runs); MARKET_REPLAY_CSV replays recorded prices instead
# (header timestamp,instance_type,price). Billing charges started minutes every BILLING_INTERVAL.
MARKET_STEP_INTERVAL = env_float("MARKET_STEP_INTERVAL", 10.0, minimum=0.1)
MARKET_REPLAY_CSV = env_str("MARKET_REPLAY_CSV", "")
# A file that is not there would stop every market tick (spot and pay-as-you-go jobs would
# never start): it is refused at start-up instead. A relative path is the project's.
if MARKET_REPLAY_CSV and not (BASE_DIR / MARKET_REPLAY_CSV).is_file():
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"MARKET_REPLAY_CSV: no such file: {BASE_DIR / MARKET_REPLAY_CSV} (a relative path is "
        f"read from {BASE_DIR})"
    )
MARKET_SEED = env_str("MARKET_SEED", "")
BILLING_INTERVAL = env_float("BILLING_INTERVAL", 60.0, minimum=1.0)
# Node agents (EXECUTION_BACKEND=agent, docs/execution.md): agents are asked for a heartbeat
# every AGENT_HEARTBEAT_INTERVAL seconds; a node silent for NODE_LOST_AFTER seconds is Lost
# and its pods fail (NodeLost). Pods work under POD_WORK_ROOT; each pod's log keeps at most
# POD_LOG_MAX_BYTES. Pods are isolated (docs/execution.md): SANDBOX=strict (the default)
# refuses to run pods on a host that cannot isolate them; SANDBOX=insecure runs them with
# whatever isolation the host gives, and says so on the health page and on every pod.
AGENT_HEARTBEAT_INTERVAL = env_float("AGENT_HEARTBEAT_INTERVAL", 5.0, minimum=0.5)
NODE_LOST_AFTER = env_float("NODE_LOST_AFTER", 30.0, minimum=1.0)
if NODE_LOST_AFTER < 2 * AGENT_HEARTBEAT_INTERVAL:
    from django.core.exceptions import ImproperlyConfigured

    # Shorter, a node would be Lost (and its pods failed) between two heartbeats, or on the
    # first that is a moment late.
    raise ImproperlyConfigured(
        f"NODE_LOST_AFTER ({NODE_LOST_AFTER:g} s) must be at least twice "
        f"AGENT_HEARTBEAT_INTERVAL ({AGENT_HEARTBEAT_INTERVAL:g} s)"
    )
POD_WORK_ROOT = Path(env_str("POD_WORK_ROOT", str(VAR_DIR / "pods")))
# Each pod runs under a shim of its own that outlives the agent; the shims keep their state
# under AGENT_STATE_DIR (never visible to a pod), where a restarted agent re-adopts them.
# Every AGENT_RECONCILE_SECONDS an agent compares what the database says it should run with
# what runs. On a stop (SIGTERM) the agent leaves its pods running, unless
# AGENT_STOP_PODS_ON_EXIT: then it stops them and they are requeued (AgentStopped).
AGENT_STATE_DIR = Path(env_str("AGENT_STATE_DIR", str(VAR_DIR / "agent")))
AGENT_RECONCILE_SECONDS = env_float("AGENT_RECONCILE_SECONDS", 5.0, minimum=0.5)
AGENT_STOP_PODS_ON_EXIT = env_bool("AGENT_STOP_PODS_ON_EXIT", False)
POD_LOG_MAX_BYTES = env_int("POD_LOG_MAX_BYTES", 10 * 1024 * 1024, minimum=1024)
# Housekeeping (apps/agent/housekeeping.py): POD_WORK_RETENTION_HOURS after a job ends its work
# dirs and data are removed (logs and the newest POD_KEEP_CHECKPOINTS checkpoints stay), every
# POD_HOUSEKEEPING_SECONDS, which also records each job's disk use.
POD_WORK_RETENTION_HOURS = env_int("POD_WORK_RETENTION_HOURS", 24, minimum=0)
POD_KEEP_CHECKPOINTS = env_int("POD_KEEP_CHECKPOINTS", 2, minimum=1)
POD_HOUSEKEEPING_SECONDS = env_int("POD_HOUSEKEEPING_SECONDS", 300, minimum=5)
# Job metrics (apps/agent/metrics.py): each agent samples its pods every POD_METRICS_SECONDS
# (one row per pod, all its pods in one insert) and housekeeping removes samples older than
# POD_METRICS_RETENTION_DAYS.
POD_METRICS_SECONDS = env_float("POD_METRICS_SECONDS", 15.0, minimum=1.0)
POD_METRICS_RETENTION_DAYS = env_float("POD_METRICS_RETENTION_DAYS", 7.0, minimum=0.01)
SANDBOX = env_str("SANDBOX", "strict")
if SANDBOX not in {"strict", "insecure"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"SANDBOX: expected strict (isolate pods, the default) or insecure (run pods with "
        f"what the host gives, unsafe), got {SANDBOX!r}"
    )
# Each job's pods run as uid/gid POD_UID_BASE + the job's number (never root); limits the
# kernel enforces per pod: POD_PIDS_MAX processes and threads, /tmp and /dev/shm sizes, and
# POD_DISK_QUOTA_MIB / POD_MAX_FILES for the job's files on a host (work dirs, checkpoints,
# data, logs) (checked every POD_DISK_CHECK_SECONDS; no single file may outgrow the quota).
POD_UID_BASE = env_int("POD_UID_BASE", 200_000, minimum=1000)
POD_PIDS_MAX = env_int("POD_PIDS_MAX", 512, minimum=16)
POD_TMP_MIB = env_int("POD_TMP_MIB", 1024, minimum=1)
POD_SHM_MIB = env_int("POD_SHM_MIB", 512, minimum=1)
POD_DISK_QUOTA_MIB = env_int("POD_DISK_QUOTA_MIB", 20 * 1024, minimum=1)
POD_MAX_FILES = env_int("POD_MAX_FILES", 200_000, minimum=100)
POD_DISK_CHECK_SECONDS = env_float("POD_DISK_CHECK_SECONDS", 5.0, minimum=0.2)
# Pods of one job on several hosts: each host's agent owns a pod subnet (e.g. 10.232.1.0/24,
# a different one per host) and links each job's namespace to it; nftables admits only the
# same job's addresses on the other hosts. Empty: a job's pods reach each other on one host.
POD_CIDR = env_str("POD_CIDR", "")
if POD_CIDR:
    import ipaddress

    from django.core.exceptions import ImproperlyConfigured

    try:
        ipaddress.IPv4Network(POD_CIDR)
    except ValueError as exc:
        raise ImproperlyConfigured(f"POD_CIDR: not an IPv4 subnet ({exc})") from None
# Pods reaching the outside world (public addresses only, masqueraded behind the host; never
# a private, link-local or loopback address, nor the host itself). Off by default; it needs
# POD_CIDR, which gives each job's namespace its link to the host.
POD_EGRESS = env_bool("POD_EGRESS", False)
if POD_EGRESS and not POD_CIDR:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("POD_EGRESS needs POD_CIDR (the pods' link to the host)")


def _every(task: str, seconds: float) -> dict:
    """A beat entry whose `expires` equals its period, so a backlog of ticks never piles up
    behind a stopped worker."""
    return {"task": task, "schedule": schedule(seconds), "options": {"expires": seconds}}


# The beat schedule is data: key → task, period from env.

CELERY_BEAT_SCHEDULE = {
    "heartbeat": _every("apps.core.tasks.heartbeat_task", HEARTBEAT_INTERVAL),
    "scheduler-tick": _every("apps.scheduler.tasks.scheduler_tick_task", SCHEDULER_TICK_INTERVAL),
    "admit-creating": _every("apps.jobs.tasks.jobs_admit_creating_task", SCHEDULER_TICK_INTERVAL),
    "market-step": _every("apps.market.tasks.market_step_task", MARKET_STEP_INTERVAL),
    "billing-accrue": _every("apps.billing.tasks.billing_accrue_task", BILLING_INTERVAL),
    "agent-heartbeat": _every("apps.agent.tasks.agent_heartbeat_task", AGENT_HEARTBEAT_INTERVAL),
    "nodes-watchdog": _every("apps.agent.tasks.nodes_watchdog_task", AGENT_HEARTBEAT_INTERVAL),
    "whatif-sweep": _every("apps.whatif.tasks.whatif_sweep_task", 60),
}

# "agent": node agents run pods as real processes; "none": placed pods count as running.
EXECUTION_BACKEND = env_str("EXECUTION_BACKEND", "agent")
if EXECUTION_BACKEND not in {"agent", "none"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"EXECUTION_BACKEND: expected agent or none, got {EXECUTION_BACKEND!r}"
    )

FLOWER_URL = env_str("FLOWER_URL", "http://127.0.0.1:5555")

# Access keys are stored encrypted with a key derived from this secret (or SECRET_KEY: so in
# DEBUG without either, the installation's generated key). The public default is refused.
ACCESS_KEY_ENCRYPTION_SECRET = env_secret(
    "ACCESS_KEY_ENCRYPTION_SECRET", debug=DEBUG, var_dir=VAR_DIR, default=SECRET_KEY
)

JOBS_PAGE_SIZE = env_int("JOBS_PAGE_SIZE", 20, minimum=1)
