"""What every REST endpoint shares: pagination and the throttle."""

from __future__ import annotations

from rest_framework.pagination import PageNumberPagination
from rest_framework.throttling import UserRateThrottle


class Pages(PageNumberPagination):
    """{count, next, previous, results}; ?page=N, ?page_size=N (at most 200)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class PerUserThrottle(UserRateThrottle):
    """Requests per authenticated user (ETHAN_API_RATE, e.g. "600/min")."""

    scope = "user"


def paginate(view, request, queryset, serializer_class):
    paginator = Pages()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
