"""What every REST endpoint shares: pagination and the error answers (the throttles are in
ethan_shared.throttles, the token authentication in ethan_shared.authentication)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.db import DatabaseError
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


class Pages(PageNumberPagination):
    """{count, next, previous, results}; ?page=N, ?page_size=N (at most 200)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


log = logging.getLogger(__name__)


def api_token_get_or_create(*, owner: AbstractBaseUser) -> str:
    """The person's API token (REST, /v1, MCP), made on first use. Two requests racing to make
    it both get the one row: a token's user is unique, and get_or_create reads the winner's row
    after losing the insert."""
    # Imported here: this module is loaded with the settings' logging (ethan_site.errors),
    # before the app registry, which a model needs.
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=owner)[0].key


def api_token_owner_id(*, key: str) -> int | None:
    """Whose API token `key` is (their user id), None if nobody's: for a door that reads a
    Bearer token itself (/mcp, beside OAuth's access tokens)."""
    from rest_framework.authtoken.models import Token  # after the app registry, as above

    return Token.objects.filter(key=key).values_list("user_id", flat=True).first()


def openai_error(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict:
    """OpenAI's error body, which the openai SDKs raise from: the type follows the status as
    OpenAI's own API sets it."""
    if status == 429:
        kind = "requests"
    elif status >= 500:
        kind = "server_error"
    elif status == 403:
        kind = "permission_error"
    else:
        kind = "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def paginate(view, request, queryset, serializer_class):
    paginator = Pages()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


def _first_error(errors: dict) -> str:
    field, messages = next(iter(errors.items()))
    message = messages[0] if isinstance(messages, list) and messages else messages
    if isinstance(message, dict):  # a nested serializer's errors
        return f"{field}: {_first_error(message)}"
    return str(message) if field == "non_field_errors" else f"{field}: {message}"


def refused(errors: dict[str, list[str]]) -> Response:
    """A 400 that a view finds itself (a service's refusal), in the one error shape: the
    field messages with a `detail` beside them, as DRF's own field errors get."""
    return Response({"detail": _first_error(errors), **errors}, status=status.HTTP_400_BAD_REQUEST)


def exception_handler(exc, context):
    """Every error is JSON with a `detail` (field errors keep their fields beside it). DRF's
    answers, plus a JSON 503 for a database that fails (down, restarting, full):
    an API client gets a body it can read and retry on, not Django's HTML 500. Nothing is
    echoed of the error itself (it may name hosts or tables)."""
    if isinstance(exc, RecursionError):  # json.loads on a body nested thousands deep
        exc = exceptions.ParseError("the JSON is nested too deeply")
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" not in response.data:
        # Field errors keep DRF's {field: [messages]} and gain the one key every error has.
        response.data = {"detail": _first_error(response.data), **response.data}
    elif response is not None and isinstance(response.data, list):
        response.data = {"detail": "; ".join(str(item) for item in response.data)}
    if response is None and isinstance(exc, DatabaseError):
        log.error("database error in %s: %s", context["request"].path, type(exc).__name__)
        set_rollback()  # as DRF does for the errors it answers: a surrounding atomic undoes
        return Response(
            {"detail": "the database is unavailable: retry later", "retryable": True},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    return response
