"""GET /api/context (what the next turn would send) and GET /api/search (memory search). The
turn itself, POST /api/chat, is a door: channels_app/rest.py."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agent_app.memory_search import MAX_LIMIT, SCOPES, memory_search
from agent_app.paths import PATHS
from agent_app.turn import TurnInputError, turn_plan, turn_prompt
from ethan_shared.limits import SEARCH_QUERY_MAX_CHARS
from sessions_app import services as session_services
from sessions_app.apis import session_or_404
from sessions_app.models import ChatSession


def refused(exc: TurnInputError) -> Response:
    """A turn's input refused by turn_plan (the one validator), as this API's 400: the reason
    in `detail`, and under the field at fault as a serializer's error would be."""
    body: dict = {"detail": str(exc)}
    if exc.field:
        body[exc.field] = [str(exc)]
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


class ContextApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("message", str, required=True, description="the next message"),
            OpenApiParameter("session_id", str, description="continue this session"),
            OpenApiParameter("mode", str),
            OpenApiParameter("path", str, enum=list(PATHS)),
        ],
        responses={
            200: inline_serializer(
                "ContextOutput",
                fields={
                    "path": serializers.CharField(),
                    "system": serializers.CharField(),
                    "messages": serializers.ListField(child=serializers.DictField()),
                },
            )
        },
    )
    def get(self, request):
        """Exactly what the next turn would send, without storing or changing anything."""
        session = None
        if request.query_params.get("session_id"):
            session = session_or_404(request, request.query_params["session_id"])
        try:
            plan = turn_plan(
                owner=request.user,
                session=session,
                text=request.query_params.get("message", ""),
                mode=request.query_params.get("mode"),
                path=request.query_params.get("path"),
                channel=ChatSession.Channel.API,
            )
        except TurnInputError as exc:
            return refused(exc)
        if session is None:  # not stored: lazy persistence writes a session with its message
            session = session_services.session_start(
                owner=request.user, mode=plan.mode, channel=ChatSession.Channel.API
            )
        prompt = turn_prompt(plan=plan, session=session, stored=False)
        system, context = prompt.system, prompt.context
        return Response(
            {
                "path": plan.path,
                "system": system.text,
                "messages": [{"role": m.role, "content": m.content} for m in context],
            }
        )


class SearchApi(APIView):
    class SearchQuery(serializers.Serializer):
        q = serializers.CharField(max_length=SEARCH_QUERY_MAX_CHARS)
        scope = serializers.ChoiceField(choices=list(SCOPES), default="all")
        limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=10)

    @extend_schema(
        parameters=[SearchQuery],
        responses=inline_serializer(
            "SearchHit",
            many=True,
            fields={
                "kind": serializers.ChoiceField(choices=["fact", "episode", "message"]),
                "id": serializers.IntegerField(),
                "session_id": serializers.CharField(allow_null=True),
                "seq": serializers.IntegerField(allow_null=True),
                "content": serializers.CharField(),
                "score": serializers.FloatField(),
                "created_at": serializers.DateTimeField(),
            },
        ),
    )
    def get(self, request):
        """Facts, episodes and past messages ranked by BM25 (Chinese and English)."""
        params = self.SearchQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        hits = memory_search(
            owner=request.user,
            query=params.validated_data["q"],
            scope=params.validated_data["scope"],
            limit=params.validated_data["limit"],
        )
        return Response(
            [
                {
                    "kind": h.kind,
                    "id": h.id,
                    "session_id": h.session_id,
                    "seq": h.seq,
                    "content": h.content,
                    "score": round(h.score, 4),
                    "created_at": h.created_at,
                }
                for h in hits
            ]
        )
