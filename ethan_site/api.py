"""What every REST endpoint shares: pagination, the throttle and the error answers."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from rest_framework import status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback


class Pages(PageNumberPagination):
    """{count, next, previous, results}; ?page=N, ?page_size=N (at most 200)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


log = logging.getLogger(__name__)


class PerUserThrottle(UserRateThrottle):
    """Requests per authenticated user (ETHAN_API_RATE, e.g. "600/min")."""

    scope = "user"


def paginate(view, request, queryset, serializer_class):
    paginator = Pages()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


def exception_handler(exc, context):
    """DRF's answers, plus a JSON 503 for a database that fails (down, restarting, full):
    an API client gets a body it can read and retry on, not Django's HTML 500. Nothing is
    echoed of the error itself (it may name hosts or tables)."""
    response = drf_exception_handler(exc, context)
    if response is None and isinstance(exc, DatabaseError):
        log.error("database error in %s: %s", context["request"].path, type(exc).__name__)
        set_rollback()  # as DRF does for the errors it answers: a surrounding atomic undoes
        return Response(
            {"detail": "the database is unavailable: retry later", "retryable": True},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    return response
