"""GET /api/sessions?q= · GET/DELETE /api/sessions/{id} · GET /api/sessions/{id}/messages."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from ethan_shared.api import paginate
from ethan_shared.limits import SEARCH_QUERY_MAX_CHARS
from sessions_app import selectors, services
from sessions_app.errors import SessionNotFound
from sessions_app.models import ChatSession, Message


class SessionOutput(serializers.ModelSerializer):
    class Meta:
        model = ChatSession
        fields = ["id", "title", "model", "mode", "channel", "created_at", "updated_at"]


class MessageOutput(serializers.ModelSerializer):
    class Meta:
        model = Message
        fields = [
            "seq",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "interrupted",
            "created_at",
        ]


def session_or_404(request, session_id: str) -> ChatSession:
    """The one ownership check: another owner's session does not exist for this caller."""
    try:
        return selectors.session_get_for_owner(owner=request.user, session_id=session_id)
    except SessionNotFound:
        raise Http404("no such session") from None


class SessionsApi(APIView):
    class SessionsQuery(serializers.Serializer):
        # DRF's CharField refuses NUL characters (PostgreSQL cannot compare text with them): a
        # 400, not a database error.
        q = serializers.CharField(
            required=False, allow_blank=True, max_length=SEARCH_QUERY_MAX_CHARS
        )

    @extend_schema(
        parameters=[OpenApiParameter("q", str, description="search text")],
        responses=SessionOutput(many=True),
    )
    def get(self, request):
        params = self.SessionsQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.validated_data.get("q", "").strip()
        owned = selectors.sessions_for_owner(owner=request.user)
        if query:
            ids = [
                s.pk for s in selectors.session_search(owner=request.user, query=query, limit=200)
            ]
            owned = owned.filter(pk__in=ids)
        return paginate(self, request, owned.order_by("-updated_at", "-created_at"), SessionOutput)


class SessionApi(APIView):
    @extend_schema(responses=SessionOutput)
    def get(self, request, session_id: str):
        return Response(SessionOutput(session_or_404(request, session_id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, session_id: str):
        services.session_delete(session=session_or_404(request, session_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionMessagesApi(APIView):
    @extend_schema(responses=MessageOutput(many=True))
    def get(self, request, session_id: str):
        session = session_or_404(request, session_id)
        return paginate(self, request, selectors.session_messages(session=session), MessageOutput)
