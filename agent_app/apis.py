"""POST /api/chat (the turn) and GET /api/context (what the next turn would send)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

import llm
from agent_app.memory_search import MAX_LIMIT, SCOPES, memory_search
from agent_app.modes import MODE_ALIASES, mode_parse
from agent_app.paths import PATHS
from agent_app.prompts import build_system
from agent_app.services import TurnInputError, last_user_message, turn_prepare, turn_run
from memory_app.working import build_context
from sessions_app import services as session_services
from sessions_app.apis import session_or_404
from sessions_app.models import ChatSession
from sessions_app.services import SessionBusy

log = logging.getLogger(__name__)


class ModeField(serializers.CharField):
    """work, companion or 陪伴 (stored as companion)."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        try:
            return mode_parse(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class ModelField(serializers.CharField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        try:
            llm.check_model(value)  # unknown, or no key for its provider: 400
        except llm.ModelConfigError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value


ChatOutput = inline_serializer(
    "ChatOutput",
    fields={
        "session_id": serializers.CharField(),
        "reply": serializers.CharField(),
        "path": serializers.ChoiceField(choices=PATHS),
        "model": serializers.CharField(),
        "usage": inline_serializer(
            "Usage",
            fields={
                "input_tokens": serializers.IntegerField(),
                "output_tokens": serializers.IntegerField(),
            },
        ),
    },
)


class ChatApi(APIView):
    class ChatInput(serializers.Serializer):
        message = serializers.CharField(trim_whitespace=True)
        session_id = serializers.CharField(required=False, max_length=32)
        mode = ModeField(required=False, help_text=", ".join(MODE_ALIASES))
        path = serializers.ChoiceField(choices=PATHS, required=False)
        model = ModelField(required=False, max_length=100)

        def validate_message(self, value: str) -> str:
            limit = settings.ETHAN_MESSAGE_MAX_CHARS
            if len(value) > limit:
                raise serializers.ValidationError(
                    f"the message is {len(value)} characters long; the limit is {limit}"
                )
            return value

    @extend_schema(request=ChatInput, responses={200: ChatOutput})
    def post(self, request):
        data = self.ChatInput(data=request.data)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        session = None
        if params.get("session_id"):
            session = session_or_404(request, params["session_id"])
        try:
            result = turn_run(
                owner=request.user,
                session=session,
                text=params["message"],
                mode=params.get("mode"),
                path=params.get("path"),
                model=params.get("model"),
                channel=ChatSession.Channel.API,
            )
        except TurnInputError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except SessionBusy as exc:
            # An earlier turn on this session outlasted ETHAN_TURN_WAIT_SECONDS: this one
            # wrote nothing, so sending it again is safe.
            return Response(
                {
                    "detail": "another reply on this session is still being written; "
                    "nothing was stored: retry",
                    "session_id": exc.session_id,
                    "retryable": True,
                },
                status=status.HTTP_409_CONFLICT,
            )
        except llm.ModelError as exc:
            # The message is stored: the client can retry on the session it names.
            unavailable = isinstance(exc, llm.ModelUnavailable)
            stored = getattr(exc, "session", None)
            detail = (
                f"the model is unavailable right now ({exc}); your message is stored: "
                "retry on this session"
                if unavailable
                else f"the model could not answer ({exc}); your message is stored"
            )
            return Response(
                {
                    "detail": detail,
                    "session_id": stored.pk if stored else None,
                    "retryable": unavailable,
                },
                status=status.HTTP_503_SERVICE_UNAVAILABLE
                if unavailable
                else status.HTTP_502_BAD_GATEWAY,
            )
        except DatabaseError as exc:
            # A JSON answer, not Django's HTML 500: the client learns whether its message was
            # kept (turn_run attaches the session once it is) and that it may retry.
            log.error("database error during a turn: %s", type(exc).__name__)
            stored = getattr(exc, "session", None)
            detail = (
                "a database error interrupted the reply; your message is stored and the "
                "step it interrupted was not kept: retry on this session"
                if stored
                else "the database is unavailable; nothing was stored: retry later"
            )
            return Response(
                {"detail": detail, "session_id": stored.pk if stored else None, "retryable": True},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response(
            {
                "session_id": result.session.pk,
                "reply": result.reply,
                "path": result.path,
                "model": result.model,
                "usage": {
                    "input_tokens": result.input_tokens,
                    "output_tokens": result.output_tokens,
                },
            }
        )


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
        message = request.query_params.get("message", "")
        session = None
        if request.query_params.get("session_id"):
            session = session_or_404(request, request.query_params["session_id"])
        try:
            text, mode, path, _model = turn_prepare(
                session=session,
                text=message,
                mode=request.query_params.get("mode"),
                path=request.query_params.get("path"),
                model=None,
            )
        except TurnInputError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        if session is None:
            session = session_services.session_start(
                owner=request.user, mode=mode, channel=ChatSession.Channel.API
            )
        system = build_system(
            owner=request.user,
            mode=mode,
            path=path,
            text=text,
            session_id=session.pk if session.is_persisted else None,
            mark_accessed=False,
            # Not stored yet, so the session's last user message is the previous turn.
            previous=last_user_message(session),
        )
        context = build_context(
            session=session, current_input=text, exclude_fact_ids=[fact.pk for fact in system.facts]
        )
        return Response(
            {
                "path": path,
                "system": system.text,
                "messages": [{"role": m.role, "content": m.content} for m in context],
            }
        )


class SearchApi(APIView):
    class SearchQuery(serializers.Serializer):
        q = serializers.CharField(max_length=1000)
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
