"""Ethan's one settings module, driven by the environment.

Precedence for every value: the environment, then $ETHAN_HOME/config.yaml, then the default
(see ethan_shared/config.py and the configuration table in README.md). With nothing set, Ethan runs
embedded: SQLite under $ETHAN_HOME, no broker (tasks run in-process after the reply), and the
offline model.
"""

from __future__ import annotations

import os
import sys
import zoneinfo
from pathlib import Path

import dj_database_url

from embedder import config as embedder_config
from ethan_llm.config import PROVIDER_VARS
from ethan_llm.errors import ModelConfigError
from ethan_llm.routing import DEFAULT_COMPRESSION_ROUTES, parse_routes, provider_for
from ethan_shared.config import Config, ConfigError, secret_key_file
from ethan_shared.private import home_tighten, private_file

BASE_DIR = Path(__file__).resolve().parent.parent
# Lower case: not a setting, so no error page ever lists it (it holds the whole environment).
_config = Config.load()
ETHAN_HOME = _config.home


def _system_time_zone() -> str:
    """The machine's IANA zone: session ids use local time, as the original CLI did."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz == "UTC" or "/" in tz:
        return tz
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        target = str(localtime.resolve())
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    return "UTC"


# --- Django core -----------------------------------------------------------------------------

# Off unless asked for (DJANGO_DEBUG=1): the console and the tests do not need Django's debug
# pages, and a server process must never show them (they print settings and local variables).
DEBUG = _config.get("DJANGO_DEBUG", False, bool)
# DJANGO_SECRET_KEY, or the install's own key made once in $ETHAN_HOME/secret_key.
SECRET_KEY = _config.get("DJANGO_SECRET_KEY", "", str) or secret_key_file(ETHAN_HOME)

ALLOWED_HOSTS = _config.get("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"], list)
CSRF_TRUSTED_ORIGINS = _config.get("DJANGO_CSRF_TRUSTED_ORIGINS", [], list)

# Behind an HTTPS proxy (docs/operations.md, "Production"): ETHAN_HTTPS=1 trusts the proxy's
# X-Forwarded-Proto, redirects plain HTTP (but /healthz, for the load balancer's probe), marks
# cookies secure and sends HSTS; `manage.py check --deploy` then passes.
ETHAN_HTTPS = _config.get("ETHAN_HTTPS", False, bool)
if ETHAN_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = _config.positive("DJANGO_SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _config.get(
        "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True, bool
    )
    SECURE_HSTS_PRELOAD = _config.get("DJANGO_SECURE_HSTS_PRELOAD", True, bool)

# Request bodies: the largest honest one is a whole profile (100,000 characters, up to 600 kB
# as JSON-escaped CJK). Anything bigger is answered 413 before it is read (ethan_site.errors).
ETHAN_MAX_BODY_BYTES = _config.positive("ETHAN_MAX_BODY_BYTES", 1_048_576)
DATA_UPLOAD_MAX_MEMORY_SIZE = ETHAN_MAX_BODY_BYTES
# An export uploaded on the memory page (ChatGPT or Claude, docs/import.md): it waits in the
# database for its task, so it is bounded; a larger one imports with `ethan import --from`.
ETHAN_IMPORT_MAX_BYTES = _config.positive("ETHAN_IMPORT_MAX_BYTES", 50 * 1_048_576)
# Reading an export (the page's or `ethan import`'s, sessions_app.imports.export.ReadLimits):
# its conversations.json expanded (1 GB: twenty years of daily chats is a few hundred MB), a
# zip's compression ratio (exports' JSON inflates 5-15 times; a zip bomb hundreds or more) and
# the seconds its first, whole read may take (36 MB in 7-8 s on 2 busy cores: 1 GB in 4 min).
ETHAN_IMPORT_MAX_EXPANDED_BYTES = _config.positive("ETHAN_IMPORT_MAX_EXPANDED_BYTES", 1 << 30)
ETHAN_IMPORT_MAX_RATIO = _config.positive("ETHAN_IMPORT_MAX_RATIO", 100)
ETHAN_IMPORT_MAX_SECONDS = _config.positive("ETHAN_IMPORT_MAX_SECONDS", 300)

# Error pages never show a secret, debug or not: settings whose names say so, passwords in
# URLs and every configured secret value are masked (ethan_site.errors).
DEFAULT_EXCEPTION_REPORTER_FILTER = "ethan_site.errors.SecretsFilter"
DEFAULT_EXCEPTION_REPORTER = "ethan_site.errors.SecretsReporter"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "ethan_site",
    "sessions_app",
    "memory_app",
    "profile_app",
    "episodes_app",
    "agent_app",
    # The doors above the turn: console, REST chat, /v1, Lark (channels_app/).
    "channels_app",
    # Ethan as its own OAuth authorization server, for MCP hosts that connect by URL
    # (django-oauth-toolkit's models and views, extended in oauth_app).
    "oauth2_provider",
    "oauth_app",
]

MIDDLEWARE = [
    # Outermost: every error under /api/, /lark/, /v1/ and /mcp is JSON, whatever raised it.
    "ethan_site.errors.JsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "ethan_site.static_files.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A sign-in refused by the throttle (below) becomes a 429 page.
    "ethan_site.signin.SignInThrottleMiddleware",
]

ROOT_URLCONF = "ethan_site.urls"
WSGI_APPLICATION = "ethan_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "ethan_site" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------------

_default_sqlite = f"sqlite:///{ETHAN_HOME / 'ethan.sqlite3'}"
# Lower case: the URL may hold a password, and settings are what error pages list.
_database_url = _config.get("DATABASE_URL", _default_sqlite, str)
try:
    _database = dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)
except (ValueError, KeyError) as exc:  # dj-database-url raises these for unknown schemes
    raise ConfigError(f"DATABASE_URL from {_config.source_of('DATABASE_URL')}: {exc}") from exc

if _database["ENGINE"] == "django.db.backends.sqlite3":
    if _database["NAME"] != ":memory:":
        # Made 0600 before SQLite first opens it: its -wal, -shm and -journal files take its mode.
        private_file(Path(_database["NAME"]))
    # The console, the web process and the embedded tasks share one file. IMMEDIATE takes the
    # write lock when a transaction starts, so two writers queue up (up to `timeout` seconds)
    # instead of failing with "database is locked" when a read lock cannot be upgraded; WAL lets
    # readers go on while one writes. Each piece of work opens its own connection (CONN_MAX_AGE
    # 0: the console, the tasks, the tests); the server's threads keep theirs
    # ETHAN_SQLITE_KEEP_SECONDS (ethan_site.serving): kept everywhere, the console's Ctrl-C
    # tests failed in full test runs.
    _database["CONN_MAX_AGE"] = 0
    _database["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif _database["ENGINE"] == "django.db.backends.postgresql":
    # No JIT: Ethan's queries are short and indexed, and PostgreSQL's cost estimate for a
    # search over a million messages crosses jit_above_cost, adding 20-40 ms of compilation
    # to a query that runs in a few (bench.session_search).
    _database.setdefault("OPTIONS", {})["options"] = "-c jit=off"
    # A pool per process (psycopg's), not a connection kept per thread: the web server runs
    # each request's synchronous part in a thread lent for it or started for it (ethan_site.
    # serving.RequestThreads), and a connection kept by each would hold PostgreSQL's slots
    # however few requests are running; from a pool it is given back at the request's end
    # (CONN_MAX_AGE 0) for the next. Celery's prefork workers close the pool
    # they inherit. ETHAN_DB_POOL_SIZE connections at most per process (PostgreSQL allows
    # 100 by default, for every process together).
    _database["CONN_MAX_AGE"] = 0
    # CONN_HEALTH_CHECKS (on) has the pool check a connection before lending it: one that a
    # database restart cut is replaced, not handed out.
    _database["OPTIONS"]["pool"] = {
        "min_size": 1,
        "max_size": _config.positive("ETHAN_DB_POOL_SIZE", 20),
        "timeout": 30,
    }
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The home holds one person's memory: the folder 0700, Ethan's files in it 0600
# (ethan_shared.private). A home from before, or opened up by hand, is tightened here, by whichever
# process starts first, with one line saying so; a start that changes nothing says nothing.
_tightened = home_tighten(
    ETHAN_HOME,
    database=Path(_database["NAME"]) if _database["ENGINE"].endswith("sqlite3") else None,
)
if _tightened:
    sys.stderr.write(_tightened + "\n")

# --- Auth, i18n, static ----------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Every password sign-in (the admin's form, the site's, any later one) is counted first, per
# username and per client address, and past ETHAN_LOGIN_RATE refused before any password is
# checked (ethan_site.signin).
AUTHENTICATION_BACKENDS = [
    "ethan_site.signin.SignInThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"  # the home page: the memory pages and how to connect
LOGOUT_REDIRECT_URL = "/accounts/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "ethan_shared.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_THROTTLE_CLASSES": ["ethan_shared.throttles.PerUserThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "user": _config.rate("ETHAN_API_RATE", "600/min"),
        # Sign-in attempts on every sign-in form, per username and per client address
        # (ethan_site.signin).
        "login": _config.rate("ETHAN_LOGIN_RATE", "10/min"),
    },
    # Behind a reverse proxy, the client address is the last X-Forwarded-For hop it added, and
    # the scheme its X-Forwarded-Proto (ethan_site.forwarded: no URL made points to http).
    "NUM_PROXIES": _config.get("ETHAN_NUM_PROXIES", 0, int),
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "ethan_shared.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ethan API",
    "DESCRIPTION": "A memory-first personal agent: chat, sessions, facts, procedures, the "
    "profile and episodes. Authenticate with `Authorization: Token <key>`.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = _config.get("ETHAN_TIME_ZONE", _system_time_zone(), str)
try:
    zoneinfo.ZoneInfo(TIME_ZONE)
except (ValueError, zoneinfo.ZoneInfoNotFoundError):
    raise ConfigError(
        f"ETHAN_TIME_ZONE from {_config.source_of('ETHAN_TIME_ZONE')}: unknown time zone "
        f"{TIME_ZONE!r} (use an IANA name such as Asia/Shanghai)"
    ) from None
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# WhiteNoise finds the apps' static files directly: the admin works under gunicorn without a
# collectstatic step (a few files; no separate web server needed). Set DJANGO_STATIC_ROOT only
# to collect them for another server.
STATIC_ROOT = _config.get("DJANGO_STATIC_ROOT", "", str) or None
WHITENOISE_USE_FINDERS = True

# --- Ethan -----------------------------------------------------------------------------------

# How many sessions `ethan session list` and GET /api/sessions show by default.
ETHAN_SESSION_LIST_LIMIT = _config.positive("ETHAN_SESSION_LIST_LIMIT", 20)
# The console's local user when --user is not given: the OS login name.
ETHAN_CONSOLE_USER = _config.get("ETHAN_USER", "", str)
# Working memory (the same for the console, the API and Lark): the last hot_size rounds go to
# the model verbatim; rounds leaving the hot zone are summarised compress_batch at a time, their
# facts extracted in the same call; once the summaries cover warm_capacity rounds they are
# folded. A session's end (episode and last facts) waits until the person's ended sessions
# hold END_BATCH_ROUNDS rounds not extracted, or for END_WAIT_MINUTES (docs/memory.md).
ETHAN_MEMORY_HOT_SIZE = _config.positive("ETHAN_MEMORY_HOT_SIZE", 10)
ETHAN_MEMORY_COMPRESS_BATCH = _config.positive("ETHAN_MEMORY_COMPRESS_BATCH", 5)
ETHAN_MEMORY_WARM_CAPACITY = _config.positive("ETHAN_MEMORY_WARM_CAPACITY", 20)
ETHAN_MEMORY_END_BATCH_ROUNDS = _config.positive("ETHAN_MEMORY_END_BATCH_ROUNDS", 4)
ETHAN_MEMORY_END_WAIT_MINUTES = _config.positive("ETHAN_MEMORY_END_WAIT_MINUTES", 60)
# A worker claims a session's memory work before calling the model, for this long, renewed
# before each call: more than one call with its retries (memory_app.claims).
ETHAN_MEMORY_CLAIM_SECONDS = _config.positive("ETHAN_MEMORY_CLAIM_SECONDS", 300)
# Which facts go into <memory_context>: "relevance" (the default: confidence blended with how
# well each fact matches the message, docs/memory.md) or "seed" (the design's pure order).
ETHAN_INJECTION = _config.choice("ETHAN_INJECTION", "relevance", ("relevance", "seed"))
# Active facts kept per owner; past it the least trusted, least recently used are evicted.
ETHAN_FACT_CAPACITY = _config.positive("ETHAN_FACT_CAPACITY", 1000)
# Active behavioural rules kept per owner: every one of them is in every turn's system prompt,
# so a new rule past this is refused (switch one off first) rather than growing the prompt.
ETHAN_PROCEDURE_CAPACITY = _config.positive("ETHAN_PROCEDURE_CAPACITY", 30)
# API and Lark sessions idle this long are closed (ended_at set, episode written) by the
# sessions.close_idle periodic task. A fraction is taken (0.05: three seconds).
ETHAN_SESSION_IDLE_MINUTES = _config.get("ETHAN_SESSION_IDLE_MINUTES", 30.0, float)
if not ETHAN_SESSION_IDLE_MINUTES > 0:
    raise ConfigError(
        f"ETHAN_SESSION_IDLE_MINUTES from {_config.source_of('ETHAN_SESSION_IDLE_MINUTES')}: "
        f"must be above 0, not {ETHAN_SESSION_IDLE_MINUTES}"
    )
# Past episodes recalled into the full path's system prompt: at most this many tokens.
ETHAN_EPISODE_RECALL_TOKENS = _config.positive("ETHAN_EPISODE_RECALL_TOKENS", 600)
# The agent turn: model calls per turn at most (the tool loop's bound), and the longest message.
ETHAN_TURN_MAX_MODEL_CALLS = _config.positive("ETHAN_TURN_MAX_MODEL_CALLS", 8)
ETHAN_MESSAGE_MAX_CHARS = _config.positive("ETHAN_MESSAGE_MAX_CHARS", 32_000)
# /v1/chat/completions takes the client's whole conversation with every request: at most this
# many messages, and at most this many characters of them before the question. A pasted
# history is stored, a row per message, and its last rounds go into every later context;
# 400,000 characters is about what the largest models' context (128k tokens) holds.
ETHAN_V1_MAX_MESSAGES = _config.positive("ETHAN_V1_MAX_MESSAGES", 1_000)
ETHAN_V1_MAX_HISTORY_CHARS = _config.positive("ETHAN_V1_MAX_HISTORY_CHARS", 400_000)
# A chat app's images, sound and files travel inside its /v1 request (base64 data: URLs):
# its body may be larger than any other door's, each attachment up to its own limit, a few
# of them per question. They go to the model and are never stored (docs/openai.md).
ETHAN_V1_MAX_BODY_BYTES = _config.positive("ETHAN_V1_MAX_BODY_BYTES", 32 * 1_048_576)
ETHAN_V1_MAX_ATTACHMENT_BYTES = _config.positive("ETHAN_V1_MAX_ATTACHMENT_BYTES", 20 * 1_048_576)
ETHAN_V1_MAX_ATTACHMENTS = _config.positive("ETHAN_V1_MAX_ATTACHMENTS", 10)
# Turns on one session are answered one at a time: a turn waits at most this long for the one
# before it to finish (then it is refused, nothing written, and may be retried); a claim older
# than ETHAN_TURN_CLAIM_SECONDS belongs to a process that died and is taken over.
ETHAN_TURN_WAIT_SECONDS = _config.positive("ETHAN_TURN_WAIT_SECONDS", 120)
ETHAN_TURN_CLAIM_SECONDS = _config.positive("ETHAN_TURN_CLAIM_SECONDS", 900)
# The web server's turns (ethan_site.serve, channels_app.turns): at most this many answered at once
# in one process (past it: 503 with Retry-After), and at most this many of one person's at once
# (past it: 429 with Retry-After; a chat app opens a few at once: the chat, a title,
# suggestions). On SIGTERM the server takes no new turn and lets running ones finish for at
# most ETHAN_DRAIN_SECONDS; a reply still being written then is stored as far as it was
# written, marked interrupted.
ETHAN_TURNS_PER_PROCESS = _config.positive("ETHAN_TURNS_PER_PROCESS", 2_000)
ETHAN_TURNS_PER_PERSON = _config.positive("ETHAN_TURNS_PER_PERSON", 8)
ETHAN_DRAIN_SECONDS = _config.positive("ETHAN_DRAIN_SECONDS", 30)
# The web server closes a connection whose request line and headers have not all arrived this
# many seconds after it opened (or after the request's first byte), answering 408 to a request
# begun (ethan_site.serve.HttpLimitsProtocol, docs/operations.md).
ETHAN_HEADER_TIMEOUT = _config.positive("ETHAN_HEADER_TIMEOUT", 10)
# The server's threads for the turns' database steps (agent_app.turn_io), in each process. Each
# thread that runs Python takes the GIL from the event loop that writes every open stream: with
# 6 (and 8 for Django's part of a request), a thousand streams arriving on PostgreSQL left
# /healthz waiting seconds behind them; with 2 (and 2), 24-54 ms (docs/benchmarks.md).
ETHAN_DB_THREADS = _config.positive("ETHAN_DB_THREADS", 2)
# Their nice value on Linux (ethan_shared.threads): the event loop goes first when the CPU is
# short. 0 leaves them as the loop is.
ETHAN_THREAD_NICENESS = _config.non_negative("ETHAN_THREAD_NICENESS", 10)
# While the server serves, the objects allocated between two of the garbage collector's young
# passes (Python's 700): a pass stops the event loop, and the older passes go over every open
# stream (ethan_site.serving._serving_gc). 0 leaves Python's thresholds.
ETHAN_GC_THRESHOLD = _config.non_negative("ETHAN_GC_THRESHOLD", 20_000)
# Django's middleware (MiddlewareMixin's) run in one hop to the request's thread under the ASGI
# server, not one round trip per hook (ethan_site.serving.middleware_in_one_hop). Off: each
# hook hops, as Django does by default.
ETHAN_MIDDLEWARE_ONE_HOP = _config.get("ETHAN_MIDDLEWARE_ONE_HOP", True, bool)
# Threads kept for Django's synchronous part of a request (its signals, the middleware, the
# turn doors' admission), each lent to one request at a time, where Django starts a thread for
# every request and another to join it (ethan_site.serving.RequestThreads). 0: Django's way.
ETHAN_REQUEST_THREADS_KEPT = _config.non_negative("ETHAN_REQUEST_THREADS_KEPT", 8)
# How long each of the server's threads keeps its SQLite connection (ethan_site.serving).
ETHAN_SQLITE_KEEP_SECONDS = _config.non_negative("ETHAN_SQLITE_KEEP_SECONDS", 60)
# Milliseconds the server waits to write the vectors of the turns that ended, so that those ending
# meanwhile are written in the same batch (ethan_site.serving). 0: each at once.
ETHAN_VECTORS_LINGER_MS = _config.non_negative("ETHAN_VECTORS_LINGER_MS", 500)
# How many processes serve the doors on one port: `ethan serve --workers N` sets it for its
# processes (set it yourself to run ethan_site.asgi under another server's several workers).
# The kernel gives each connection to any of them, so with more than one /mcp is stateless:
# an MCP session kept in one process's memory could not be found by the next request.
ETHAN_SERVE_PROCESSES = _config.positive("ETHAN_SERVE_PROCESSES", 1)
# Where the web server (`ethan serve`, `make serve`) listens: every door, /mcp included.
ETHAN_BIND = _config.get("ETHAN_BIND", "127.0.0.1:8000", str)
# The MCP server over streamable HTTP (`ethan mcp --http`): where it listens. Its URL is
# http://HOST:PORT/mcp.
ETHAN_MCP_BIND = _config.get("ETHAN_MCP_BIND", "127.0.0.1:8001", str)
# Its sessions per person: past the cap the person's session idle the longest is closed for the
# new one (429 when all are in use); and new sessions (initialize) per person, counted in the
# shared cache below. One token can then neither fill the server nor refuse anyone else.
ETHAN_MCP_SESSIONS_PER_PERSON = _config.positive("ETHAN_MCP_SESSIONS_PER_PERSON", 10)
ETHAN_MCP_INITIALIZE_RATE = _config.rate("ETHAN_MCP_INITIALIZE_RATE", "30/min")

# --- OAuth (remote MCP: hosts such as Claude and ChatGPT connect to /mcp by its URL) ------------
# Ethan is its own authorization server (django-oauth-toolkit, extended in oauth_app; the flow
# and its standards in docs/mcp.md). The origin people reach Ethan at, e.g.
# https://ethan.example.com; empty takes it from each request (its Host, and its scheme as the
# proxy says under ETHAN_HTTPS). Tokens are bound to `<origin>/mcp`.
ETHAN_PUBLIC_URL = _config.get("ETHAN_PUBLIC_URL", "", str).rstrip("/")
# Access tokens are short-lived; a host refreshes them with its refresh token, which rotates on
# every use (a refresh token used twice revokes its whole family: it was stolen or replayed).
# A refresh token unused this many days (past its access token's end) is dead.
ETHAN_OAUTH_ACCESS_TOKEN_SECONDS = _config.positive("ETHAN_OAUTH_ACCESS_TOKEN_SECONDS", 3600)
ETHAN_OAUTH_REFRESH_TOKEN_DAYS = _config.positive("ETHAN_OAUTH_REFRESH_TOKEN_DAYS", 30)
# Apps one person may have connected at once; past it the consent page asks them to disconnect
# one first (memory page, Connected apps).
ETHAN_OAUTH_CLIENTS_PER_PERSON = _config.positive("ETHAN_OAUTH_CLIENTS_PER_PERSON", 20)
# Dynamic client registration (RFC 7591, for hosts without client metadata documents) is open
# to anyone, so it is counted per client address.
ETHAN_OAUTH_REGISTER_RATE = _config.rate("ETHAN_OAUTH_REGISTER_RATE", "20/hour")
# django-oauth-toolkit's own client model, named: a foreign key to a swappable model needs the
# setting when migrations are made (oauth_app.Connection points at it).
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
OAUTH2_PROVIDER = {
    # What a connection may do with the memory (oauth_app.scopes; checked per MCP tool).
    "SCOPES": {
        "memory.read": "Read your memory: facts, rules, profile, episodes, conversations",
        "memory.write": "Write to your memory: remember facts and rules, update the profile, "
        "forget facts",
    },
    # A host that asks for no scope (ChatGPT is reported to reconnect so) is offered what the
    # metadata lists, and the person chooses on the consent page as for a first connection;
    # reading only here gave a read-only token with no choice, and every write tool a 403.
    "DEFAULT_SCOPES": ["memory.read", "memory.write"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": ETHAN_OAUTH_ACCESS_TOKEN_SECONDS,
    "REFRESH_TOKEN_EXPIRE_SECONDS": ETHAN_OAUTH_REFRESH_TOKEN_DAYS * 86_400,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    # OAuth 2.1: the code flow with PKCE S256 only; no implicit or password grant, no "plain".
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    # RFC 9207: the redirect back carries `iss`, so a host can tell which server answered.
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    # A code exchanged twice revokes the tokens of its first exchange (RFC 6749 §4.1.2).
    "OAUTH2_VALIDATOR_CLASS": "oauth_app.validators.Validator",
    # Tokens are stored hashed; a leaked table holds no usable token.
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    # Every MCP host is a public client (no secret it could keep): PKCE stands in for one.
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
    # The consent page is shown every time a host asks (it names what the host may do).
    "REQUEST_APPROVAL_PROMPT": "force",
    # Redirect URIs match exactly (oauth_app.clients allows https, or http on loopback for
    # desktop hosts), but for the port of http://127.0.0.1 and http://[::1]: RFC 8252 §7.3 has
    # the server accept any port there, as a desktop host listens on whichever port its system
    # gave it. Any program on that computer could listen there: the consent page says so.
    # "localhost" is matched port included (RFC 8252 §8.3 advises against it).
    "ALLOW_LOCALHOST_LOOPBACK": False,
    "OIDC_ISS_ENDPOINT": ETHAN_PUBLIC_URL,
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "CIMD_ENABLED": True,
    # A client metadata document is fetched from the client's own https URL, never from a
    # private, loopback or link-local address (the tests name a fetcher of their own, which
    # reaches their document servers on loopback: tests/oauth_app/fetcher.py).
    "CIMD_METADATA_FETCHER": "oauth_app.cimd.MetadataFetcher",
    "CIMD_FETCH_TIMEOUT_SECONDS": _config.positive("ETHAN_OAUTH_CIMD_TIMEOUT_SECONDS", 5),
    "CIMD_MAX_DOCUMENT_SIZE": 16 * 1024,
    # A document is fetched on the request's thread, within its deadline (body included,
    # oauth_app.cimd), a few at once: a request past the cap is answered at once as an unknown
    # client, so no burst of unknown URLs holds a thread each for the deadline.
    "CIMD_MAX_CONCURRENT_FETCHES": 2,
    # A URL first seen counts as a registration from its address (oauth_app.throttles).
    "CIMD_REGISTRATION_PERMISSION_CLASSES": ("oauth_app.throttles.UnknownDocumentPermission",),
    "OAUTH2_PROTECTED_RESOURCE_NAME": "Ethan memory",
}
# django-oauth-toolkit's deploy check warns that http redirect URIs are allowed at all; Ethan
# allows them only to the loopback interface, where a desktop host listens (RFC 8252 §7.3, as
# RFC 9700 §2.1 permits), and refuses any other (oauth_app.clients, for registration and
# metadata documents alike).
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]

# --- Lark -----------------------------------------------------------------------------------
# An event still being answered this long after a worker took it belongs to a worker that died:
# the sweep (channels.lark_reclaim, every minute) takes it back. Above the tasks' hard time
# limit (checked with it below), so no worker still runs it then.
ETHAN_LARK_RECLAIM_SECONDS = _config.positive("ETHAN_LARK_RECLAIM_SECONDS", 600)
# LARK_BASE_URL: https://open.larksuite.com (Lark) or https://open.feishu.cn (Feishu).
LARK_APP_ID = _config.get("LARK_APP_ID", "", str)
LARK_APP_SECRET = _config.get("LARK_APP_SECRET", "", str)
LARK_VERIFICATION_TOKEN = _config.get("LARK_VERIFICATION_TOKEN", "", str)
LARK_ENCRYPT_KEY = _config.get("LARK_ENCRYPT_KEY", "", str)
LARK_BASE_URL = _config.get("LARK_BASE_URL", "https://open.larksuite.com", str)
# The bot's own open_id (to know when a group message mentions it); fetched from Lark if unset.
LARK_BOT_OPEN_ID = _config.get("LARK_BOT_OPEN_ID", "", str)
# Signed requests older or newer than this are refused (replays).
ETHAN_LARK_MAX_SKEW_SECONDS = _config.positive("ETHAN_LARK_MAX_SKEW_SECONDS", 300)
# A reply still being written this long after its first words is shown in a card, updated at
# most once per this many seconds (Lark allows 5 updates a second per message: at least 0.25).
ETHAN_LARK_CARD_SECONDS = max(0.25, _config.get("ETHAN_LARK_CARD_SECONDS", 0.6, float))

# --- Models (handed to the plain-Python ethan_llm package in EthanSiteConfig.ready) ---------------

# The main chat model id; empty lets the LLM layer choose (first provider with a key, or offline).
ETHAN_MODEL = _config.get("ETHAN_MODEL", "", str)
for _name in ("ETHAN_MODEL", "ETHAN_COMPRESSION_MODEL"):
    try:
        if _config.get(_name, "", str):
            provider_for(_config.get(_name, "", str))
    except ModelConfigError as exc:
        raise ConfigError(f"{_name} from {_config.source_of(_name)}: {exc}") from None
# Per attempt, seconds; transient failures (429, 5xx, timeouts) are retried this many times
# with exponential backoff (0.5 s doubling, at most 8 s a wait) before ModelUnavailable.
ETHAN_MODEL_TIMEOUT = _config.get("ETHAN_MODEL_TIMEOUT", 60.0, float)
ETHAN_MODEL_RETRIES = _config.get("ETHAN_MODEL_RETRIES", 3, int)
# The model that summarises and extracts; unset follows the routing table (docs/llm.md).
ETHAN_COMPRESSION_MODEL = _config.get("ETHAN_COMPRESSION_MODEL", "", str)
try:
    ETHAN_COMPRESSION_ROUTES = (
        parse_routes(_config.get("ETHAN_COMPRESSION_ROUTES", "", str)) or DEFAULT_COMPRESSION_ROUTES
    )
except ValueError as exc:
    raise ConfigError(
        f"ETHAN_COMPRESSION_ROUTES from {_config.source_of('ETHAN_COMPRESSION_ROUTES')}: {exc}"
    ) from exc
# What memory search embeds with (embedder/, docs/embeddings.md): default (offline, weights in
# its package), off (keyword search alone), openai:<model> or gemini:<model> with the keys below.
ETHAN_EMBEDDER = _config.get("ETHAN_EMBEDDER", "default", str)
try:
    embedder_config.parse(ETHAN_EMBEDDER)
except ModelConfigError as exc:
    raise ConfigError(f"ETHAN_EMBEDDER from {_config.source_of('ETHAN_EMBEDDER')}: {exc}") from None
# The memory a process gives to the message vectors it holds for search by meaning
# (sessions_app.meaning.MessageVectors), in MB: 516 bytes a message with the default embedder,
# so 100 MB hold about 200,000 messages; past it, the least recently searched owners' are let
# go (and read again when they search).
ETHAN_VECTOR_CACHE_MB = _config.get("ETHAN_VECTOR_CACHE_MB", 160, int)
# Provider keys and base URLs, from the environment or config.yaml. ("API" in the name keeps
# Django's debug pages from ever showing them.)
ETHAN_MODEL_API_ENV = {
    name: _config.get(name, "", str) for name in PROVIDER_VARS if _config.get(name, "", str)
}

# --- Cache (the API and login throttles) -------------------------------------------------------
# Shared by every process that serves the port, or a limit of 10/min would let 10 through per
# process: the broker's Redis when there is one (ETHAN_CACHE_URL to choose another), else, with
# one process, its memory, and with more (ETHAN_SERVE_PROCESSES), files under $ETHAN_HOME/cache,
# which every process on the machine shares.
_cache_url = _config.get("ETHAN_CACHE_URL", "", str) or (
    _config.get("CELERY_BROKER_URL", "", str)
    if _config.get("CELERY_BROKER_URL", "", str).startswith(("redis://", "rediss://"))
    else ""
)
# Whether every process on every machine sees the same cache: ethan_shared.queue's coalesced
# wake-ups need it (one machine's flag cleared by another machine's worker).
ETHAN_CACHE_SHARED = bool(_cache_url)
if _cache_url:
    if not _cache_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"ETHAN_CACHE_URL from {_config.source_of('ETHAN_CACHE_URL')}: use a redis:// URL"
        )
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _cache_url,
            "KEY_PREFIX": "ethan",
            # A cache that is down must not hold a request: the throttle then lets it through.
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
elif ETHAN_SERVE_PROCESSES == 1:
    # One process serves the port (`ethan serve`'s default): every throttled request reaches
    # it, so its counts are exact in its own memory. The file cache cost a request 270-590 µs
    # of CPU (it lists its folder on every write), and past its 300 files it deleted a third
    # of them, counts and all (docs/benchmarks/streams.md).
    # The entries are one a person, username and address counted in the last period: the cap
    # bounds the memory (an API history is at most the rate's count of times), and past it
    # the least recently used third goes.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "ethan-throttles",
            "OPTIONS": {"MAX_ENTRIES": 100_000},
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "ethan_shared.throttles.HomeFileCache",
            "LOCATION": str(ETHAN_HOME / "cache"),
            "OPTIONS": {"MAX_ENTRIES": 10_000},
        }
    }

# --- Celery ----------------------------------------------------------------------------------
# One block. Unset broker = embedded mode: ethan_shared.queue.enqueue() runs tasks in this process
# once the reply has been delivered (after the console prints it, or when Django has finished
# sending the HTTP response), so nothing needs Redis on a laptop.

CELERY_BROKER_URL = _config.get("CELERY_BROKER_URL", "", str)
ETHAN_EMBEDDED = not CELERY_BROKER_URL
if ETHAN_EMBEDDED:
    # Never reach for a default amqp://localhost: anything enqueued by hand runs in-process.
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
    CELERY_TASK_EAGER_PROPAGATES = True

CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_IGNORE_RESULT = True  # tasks write their results to the database
CELERY_TIMEZONE = TIME_ZONE
# The longest task is a consolidation with a few model calls; the hard limit kills a stuck one.
CELERY_TASK_SOFT_TIME_LIMIT = _config.positive("ETHAN_TASK_SOFT_TIME_LIMIT", 240)
CELERY_TASK_TIME_LIMIT = _config.positive("ETHAN_TASK_TIME_LIMIT", 300)
# The Lark sweep takes back an event still being answered after ETHAN_LARK_RECLAIM_SECONDS,
# taking its worker for dead: only true once the hard limit has killed any task that old.
if ETHAN_LARK_RECLAIM_SECONDS <= CELERY_TASK_TIME_LIMIT:
    raise ConfigError(
        f"ETHAN_LARK_RECLAIM_SECONDS from {_config.source_of('ETHAN_LARK_RECLAIM_SECONDS')} "
        f"({ETHAN_LARK_RECLAIM_SECONDS}) must be above ETHAN_TASK_TIME_LIMIT from "
        f"{_config.source_of('ETHAN_TASK_TIME_LIMIT')} ({CELERY_TASK_TIME_LIMIT}): the Lark "
        "sweep would take back events whose worker is still answering them"
    )
# A task is acknowledged when it finishes, so a worker killed mid-task has it redelivered; the
# tasks claim their work with conditional updates, so running twice is safe.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker process keeps its database connection from one task to the next. Unset, Celery's
# Django fixup closes a prefork child's connection pool before and after every task
# (celery/celery#10554), so each task connected to PostgreSQL anew: about 8 ms of PostgreSQL's
# CPU and 1 ms of the worker's a task, measured here, for tasks of 10-30 ms. Set, the fixup
# recycles the pool every 2 x CELERY_DB_REUSE_MAX task boundaries only, and ethan_site.celery
# gives a task's connection back at its end as Django does after a request: the pool checks it
# before lending it again and replaces one a database restart broke.
CELERY_DB_REUSE_MAX = 1000
# Redis redelivers an unacknowledged task after the visibility timeout. It must exceed the
# longest task (time limit) plus the longest retry countdown (retry_backoff caps at 600 s),
# or a slow task would be handed to a second worker while the first still runs it.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _config.get(
        "ETHAN_BROKER_VISIBILITY_TIMEOUT", max(3600, CELERY_TASK_TIME_LIMIT + 600 + 60), int
    ),
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publishing happens after the reply is written: with Redis down, give up within about a second
# (the work is caught up later) rather than hold the person's answer.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}
# Memory work and channel replies on separate queues, so a backlog of consolidation never
# delays a Lark answer. Workers listen on both unless told otherwise (-Q).
CELERY_TASK_DEFAULT_QUEUE = "memory"
CELERY_TASK_ROUTES = {
    "channels.*": {"queue": "channels"},
    "memory.*": {"queue": "memory"},
    "sessions.*": {"queue": "memory"},
    "episodes.*": {"queue": "memory"},
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Without a broker the web server runs the periodic tasks itself (ethan_site.periodic), each
# every period of ethan_site.schedule times ETHAN_PERIODIC_SCALE (0.01: five minutes become
# three seconds, to watch it work or test it). Beat, with a broker, runs the declared periods.
ETHAN_PERIODIC_SCALE = _config.get("ETHAN_PERIODIC_SCALE", 1.0, float)
if not ETHAN_PERIODIC_SCALE > 0:
    raise ConfigError(
        f"ETHAN_PERIODIC_SCALE from {_config.source_of('ETHAN_PERIODIC_SCALE')}: must be above "
        f"0, not {ETHAN_PERIODIC_SCALE}"
    )

# --- Logging ---------------------------------------------------------------------------------

_LOG_LEVEL = _config.choice(
    "ETHAN_LOG_LEVEL", "WARNING", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            # Secrets masked in every line, as on the error pages (ethan_site.errors).
            "()": "ethan_site.errors.RedactingFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        }
    },
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": _LOG_LEVEL},
}
