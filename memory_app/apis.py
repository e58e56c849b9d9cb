"""The cold store over HTTP: facts (with history) and procedures, scoped to the caller."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from ethan_shared.api import paginate, refused
from ethan_shared.limits import FACT_MAX_CHARS, RULE_CONTEXT_MAX_CHARS, RULE_MAX_CHARS
from memory_app import services
from memory_app.models import Fact, FactEvent, Procedure
from memory_app.selectors import facts_for_owner
from sessions_app.models import Message


class SourceOutput(serializers.Serializer):
    """A message a fact was said in: GET /api/sessions/{session_id} shows it at `seq`."""

    message_id = serializers.IntegerField(source="id")
    session_id = serializers.CharField()
    seq = serializers.IntegerField()
    role = serializers.CharField()


class FactOutput(serializers.ModelSerializer):
    session_id = serializers.CharField(allow_null=True)
    sources = SourceOutput(many=True, read_only=True)

    class Meta:
        model = Fact
        fields = [
            "id",
            "content",
            "category",
            "confidence",
            "source",
            "source_client",
            "status",
            "superseded_by",
            "hit_count",
            "created_at",
            "last_accessed",
            "session_id",
            "sources",
        ]


class FactEventOutput(serializers.ModelSerializer):
    class Meta:
        model = FactEvent
        fields = [
            "event",
            "old_content",
            "new_content",
            "old_confidence",
            "new_confidence",
            "actor",
            "sources",
            "created_at",
        ]


class ProcedureOutput(serializers.ModelSerializer):
    class Meta:
        model = Procedure
        fields = ["id", "rule", "context", "active", "created_at"]


def _actor(request) -> str:
    return f"api:{request.user.get_username()}"


def _refused(exc: ValidationError) -> Response:
    if hasattr(exc, "error_dict"):
        return refused(exc.message_dict)
    return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_400_BAD_REQUEST)


def fact_or_404(request, fact_id: int) -> Fact:
    return get_object_or_404(facts_for_owner(owner=request.user), pk=fact_id)


class FactsApi(APIView):
    class FactsInput(serializers.Serializer):
        content = serializers.CharField(max_length=FACT_MAX_CHARS)
        category = serializers.ChoiceField(
            choices=Fact.Category.choices, default=Fact.Category.KNOWLEDGE
        )
        confidence = serializers.FloatField(min_value=0, max_value=1, default=0.8)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "status",
                str,
                enum=[s.value for s in Fact.Status] + ["all"],
                description="active (default), superseded, evicted or all",
            )
        ],
        responses=FactOutput(many=True),
    )
    def get(self, request):
        wanted = request.query_params.get("status", Fact.Status.ACTIVE)
        facts = facts_for_owner(owner=request.user)
        if wanted != "all":
            if wanted not in Fact.Status.values:
                return refused({"status": [f"unknown status {wanted!r}"]})
            facts = facts.filter(status=wanted)
        facts = facts.prefetch_related(
            Prefetch("sources", queryset=Message.objects.only("id", "session_id", "seq", "role"))
        )
        return paginate(
            self, request, facts.order_by("-confidence", "-last_accessed", "-id"), FactOutput
        )

    @extend_schema(request=FactsInput, responses={201: FactOutput})
    def post(self, request):
        data = self.FactsInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            fact = services.fact_write(
                owner=request.user, source=Fact.Source.API, **data.validated_data
            )
        except ValidationError as exc:
            return _refused(exc)
        return Response(FactOutput(fact).data, status=status.HTTP_201_CREATED)


class FactApi(APIView):
    class FactInput(serializers.Serializer):
        content = serializers.CharField(max_length=FACT_MAX_CHARS, required=False)
        category = serializers.ChoiceField(choices=Fact.Category.choices, required=False)
        confidence = serializers.FloatField(min_value=0, max_value=1, required=False)

    @extend_schema(responses=FactOutput)
    def get(self, request, fact_id: int):
        return Response(FactOutput(fact_or_404(request, fact_id)).data)

    @extend_schema(request=FactInput, responses=FactOutput)
    def patch(self, request, fact_id: int):
        fact = fact_or_404(request, fact_id)
        data = self.FactInput(data=request.data)
        data.is_valid(raise_exception=True)
        if not data.validated_data:
            return Response(
                {"detail": "nothing to change: give content, category or confidence"},
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            fact = services.fact_edit(fact=fact, actor=_actor(request), **data.validated_data)
        except ValidationError as exc:
            return _refused(exc)
        return Response(FactOutput(fact).data)

    @extend_schema(responses={204: None})
    def delete(self, request, fact_id: int):
        """Forget a fact: it is evicted (never injected again) and kept with its history."""
        services.fact_forget(fact=fact_or_404(request, fact_id), actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class FactHistoryApi(APIView):
    @extend_schema(responses=FactEventOutput(many=True))
    def get(self, request, fact_id: int):
        fact = fact_or_404(request, fact_id)
        return paginate(self, request, fact.events.order_by("created_at", "id"), FactEventOutput)


class ProceduresApi(APIView):
    class ProceduresInput(serializers.Serializer):
        rule = serializers.CharField(max_length=RULE_MAX_CHARS)
        context = serializers.CharField(
            max_length=RULE_CONTEXT_MAX_CHARS, required=False, allow_blank=True, default=""
        )

    @extend_schema(responses=ProcedureOutput(many=True))
    def get(self, request):
        procedures = Procedure.objects.filter(owner=request.user).order_by("created_at", "id")
        return paginate(self, request, procedures, ProcedureOutput)

    @extend_schema(request=ProceduresInput, responses={201: ProcedureOutput, 200: ProcedureOutput})
    def post(self, request):
        data = self.ProceduresInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            procedure, created = services.procedure_write(
                owner=request.user, source=Fact.Source.API, **data.validated_data
            )
        except ValidationError as exc:
            return _refused(exc)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(ProcedureOutput(procedure).data, status=code)


class ProcedureApi(APIView):
    class ProcedureInput(serializers.Serializer):
        rule = serializers.CharField(max_length=RULE_MAX_CHARS, required=False)
        context = serializers.CharField(
            max_length=RULE_CONTEXT_MAX_CHARS, required=False, allow_blank=True
        )
        active = serializers.BooleanField(required=False)

    def _get(self, request, procedure_id: int) -> Procedure:
        return get_object_or_404(Procedure.objects.filter(owner=request.user), pk=procedure_id)

    @extend_schema(request=ProcedureInput, responses=ProcedureOutput)
    def patch(self, request, procedure_id: int):
        procedure = self._get(request, procedure_id)
        data = self.ProcedureInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            procedure = services.procedure_edit(procedure=procedure, **data.validated_data)
        except ValidationError as exc:
            return _refused(exc)
        return Response(ProcedureOutput(procedure).data)

    @extend_schema(responses={204: None})
    def delete(self, request, procedure_id: int):
        self._get(request, procedure_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
