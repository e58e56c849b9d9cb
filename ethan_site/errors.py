"""Error answers: JSON on every machine-facing URL, and no secret on any error page.

- `JsonErrorsMiddleware` (outermost) answers every error under /api/, /lark/, /v1/ and /mcp
  as `{"detail": …}` (under /v1/, OpenAI's `{"error": {message, type, code, param}}`, which
  the chat apps on that endpoint read) with the matching status, whatever produced it:
  Django's 404 and 405, a body over ETHAN_MAX_BODY_BYTES (413, refused before it is read),
  JSON nested too deeply to parse (RecursionError, 400), and an unexpected exception (500,
  logged, nothing echoed).
- `SecretsFilter` and `SecretsReporter` keep secrets off Django's error pages (the debug page
  when DJANGO_DEBUG=1, and the reports Django logs): settings whose names say they are secret,
  passwords inside URLs (DATABASE_URL, CELERY_BROKER_URL, ETHAN_CACHE_URL) and, as a last pass
  over the rendered page, every configured secret value wherever it appears (a local variable,
  a request header, an exception message).
"""

from __future__ import annotations

import functools
import html
import logging
import os
import re
from http import HTTPStatus
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

from ethan_shared.api import openai_error
from ethan_site.hybrid import HybridMiddleware

log = logging.getLogger(__name__)

# The URLs that machines call: their errors are JSON, never an HTML page.
JSON_PREFIXES = ("/api/", "/lark/", "/v1/", "/mcp", "/healthz")
# Names of settings and environment variables whose values are secret (Django's own list, and
# the URLs that carry credentials).
SECRET_NAMES = re.compile(
    r"API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|AUTHORIZATION|DATABASE_URL|BROKER_URL|"
    r"CACHE_URL",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]+@", re.I)
MASK = "********************"


# The OpenAI-compatible endpoint (channels_app.openai): errors in OpenAI's shape.
OPENAI_PREFIX = "/v1/"


def wants_json(request: HttpRequest) -> bool:
    return request.path_info.startswith(JSON_PREFIXES)


def json_error(status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=status)


def _error(request: HttpRequest, status: int, detail: str) -> JsonResponse:
    """The error shape of the URL asked for."""
    if request.path_info.startswith(OPENAI_PREFIX):
        return JsonResponse(openai_error(status, detail), status=status)
    return json_error(status, detail)


class JsonErrorsMiddleware(HybridMiddleware):
    """Every API and webhook error as JSON: `{"detail": …}`, OpenAI's shape under /v1/.

    Sync and async (ethan_site.hybrid): its checks read only the request's headers and the
    answer's status, so under ASGI they run on the event loop, where MiddlewareMixin would
    send each of its two hooks to a thread and back."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.hybrid_init(get_response)

    def _call(self, request: HttpRequest) -> HttpResponse:
        refused = self.process_request(request)
        return self.process_response(request, refused or self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        refused = self.process_request(request)
        return self.process_response(request, refused or await self.get_response(request))

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if not wants_json(request):
            return None
        return self._body_refused(request)

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if wants_json(request) and response.status_code >= 400 and not _is_json(response):
            response = self._as_json(request, response)
        return response

    @staticmethod
    def _body_refused(request: HttpRequest) -> JsonResponse | None:
        """A body is refused by its declared length, before anything reads it (DRF's parsers
        read the stream without Django's DATA_UPLOAD_MAX_MEMORY_SIZE check)."""
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            return _error(request, 400, "the Content-Length header is not a number")
        # /v1 carries a chat app's images and files inline (base64): a limit of its own.
        v1 = request.path.startswith("/v1/")
        limit = settings.ETHAN_V1_MAX_BODY_BYTES if v1 else settings.ETHAN_MAX_BODY_BYTES
        if length > limit:
            name = "ETHAN_V1_MAX_BODY_BYTES" if v1 else "ETHAN_MAX_BODY_BYTES"
            return _error(
                request, 413, f"the request body is {length} bytes; the limit is {limit} ({name})"
            )
        return None

    @staticmethod
    def _as_json(request: HttpRequest, response: HttpResponse) -> JsonResponse:
        status = response.status_code
        try:
            detail = HTTPStatus(status).phrase.lower()
        except ValueError:
            detail = "error"
        if status == 404:
            detail = "not found"
        elif status == 405:
            detail = "method not allowed"
        answer = _error(request, status, detail)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if header in response:
                answer[header] = response[header]
        return answer

    def process_exception(self, request: HttpRequest, exc: Exception) -> JsonResponse | None:
        return exception_answer(request, exc)


def exception_answer(request: HttpRequest, exc: Exception) -> JsonResponse | None:
    """An exception's JSON answer on a machine-facing URL (None on the others): the
    middleware's, and the server's for a turn's answer written after the middleware
    (ethan_site.asgi)."""
    if not wants_json(request):
        return None
    if isinstance(exc, RecursionError):
        return _error(request, 400, "the JSON is nested too deeply")
    if isinstance(exc, RequestDataTooBig):
        return _error(request, 413, "the request body is too large")
    if isinstance(exc, Http404):
        return _error(request, 404, "not found")
    if isinstance(exc, PermissionDenied):
        return _error(request, 403, "permission denied")
    if isinstance(exc, SuspiciousOperation):
        log.warning("refused a suspicious request to %s: %s", request.path, type(exc).__name__)
        return _error(request, 400, "bad request")
    # The type only: an exception's message may carry a value the request sent or a host.
    log.error(
        "unexpected %s on %s %s", type(exc).__name__, request.method, request.path, exc_info=exc
    )
    return _error(request, 500, "internal error: the server could not answer; nothing to retry")


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith(("application/json", "text/event-stream"))


# --- no secret on an error page ------------------------------------------------------------------


def mask_url_passwords(text: str) -> str:
    """redis://:hunter2@host/0 → redis://:********@host/0 (user names stay: they help)."""
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)


@functools.cache
def _secret_values() -> tuple[str, ...]:
    """Every configured secret value, longest first: secret-named settings, the provider keys,
    the environment's secret-named variables and the passwords inside URLs. Gathered once (every
    log line is redacted), again after a setting changes (tests)."""
    values: set[str] = set()

    def add(value) -> None:
        if isinstance(value, str) and len(value) >= 6:
            values.add(value)

    for name in dir(settings):
        if name.isupper() and SECRET_NAMES.search(name):
            value = getattr(settings, name, None)
            if isinstance(value, dict):
                for item in value.values():
                    add(item)
            else:
                add(value)
    for name, value in os.environ.items():
        if SECRET_NAMES.search(name):
            add(value)
    for alias in settings.DATABASES.values():
        add(alias.get("PASSWORD"))
    for url in [value for value in values if "://" in value]:
        for match in _URL_PASSWORD.finditer(url):
            add(match.group(0).rsplit(":", 1)[1][:-1])
    # The forms a value takes on a page: as written, HTML-escaped, URL-quoted.
    forms = {form for value in values for form in (value, html.escape(value), quote(value))}
    return tuple(sorted(forms, key=len, reverse=True))


@receiver(setting_changed)
def _settings_changed(**kwargs) -> None:
    _secret_values.cache_clear()


def redact(text: str) -> str:
    """`text` with every configured secret value and every URL password masked."""
    if not settings.configured:  # a log line while the settings themselves load
        return mask_url_passwords(text)
    for secret in _secret_values():
        if secret in text:
            text = text.replace(secret, MASK)
    return mask_url_passwords(text)


class RedactingFormatter(logging.Formatter):
    """Log lines (an exception's message, a traceback) with secrets masked, as on the pages."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class SecretsFilter(SafeExceptionReporterFilter):
    """Django's filter, hiding settings and request data by the longer list of secret names,
    and, unlike Django's with debug on, local variables by their names too. Values that hide
    under other names are masked by SecretsReporter's last pass over the page."""

    hidden_settings = SECRET_NAMES

    def get_traceback_frame_variables(self, request, tb_frame):
        return [
            (name, self.cleansed_substitute if SECRET_NAMES.search(str(name)) else value)
            for name, value in super().get_traceback_frame_variables(request, tb_frame)
        ]


class SecretsReporter(ExceptionReporter):
    """The last pass: whatever the page shows (an object's repr, an exception message, a
    header), no configured secret value survives in the HTML or text Django renders."""

    def get_traceback_html(self):
        return redact(str(super().get_traceback_html()))

    def get_traceback_text(self):
        return redact(str(super().get_traceback_text()))
