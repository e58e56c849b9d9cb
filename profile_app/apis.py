"""GET/PUT /api/profile and PATCH /api/profile/sections/{key}."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ethan_shared.api import refused
from ethan_shared.limits import PROFILE_ENTRY_MAX_CHARS, PROFILE_MAX_CHARS
from profile_app import selectors, services
from profile_app.markdown import ProfileParseError, render
from profile_app.sections import SECTIONS, section_for


def profile_payload(owner, notes: list[str] | None = None) -> dict:
    contents = selectors.profile_sections(owner=owner)
    payload = {
        "markdown": render(contents),
        "sections": [
            {"key": s.key, "title": s.title, "content": contents[s.key]} for s in SECTIONS
        ],
    }
    if notes is not None:
        payload["notes"] = notes
    return payload


ProfileOutput = inline_serializer(
    "ProfileOutput",
    fields={
        "markdown": serializers.CharField(),
        "sections": serializers.ListField(
            child=inline_serializer(
                "ProfileSectionOutput",
                fields={
                    "key": serializers.CharField(),
                    "title": serializers.CharField(),
                    "content": serializers.CharField(),
                },
            )
        ),
        "notes": serializers.ListField(child=serializers.CharField(), required=False),
    },
)


class ProfileApi(APIView):
    class ProfileInput(serializers.Serializer):
        markdown = serializers.CharField(
            allow_blank=True, trim_whitespace=False, max_length=PROFILE_MAX_CHARS
        )

    @extend_schema(responses=ProfileOutput)
    def get(self, request):
        return Response(profile_payload(request.user))

    @extend_schema(request=ProfileInput, responses=ProfileOutput)
    def put(self, request):
        data = self.ProfileInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            notes = services.profile_replace(
                owner=request.user,
                markdown=data.validated_data["markdown"],
                actor=f"api:{request.user.get_username()}",
            )
        except ProfileParseError as exc:
            return refused({"markdown": [str(exc)]})
        return Response(profile_payload(request.user, notes))


class ProfileSectionApi(APIView):
    class SectionInput(serializers.Serializer):
        entry = serializers.CharField(
            allow_blank=True, trim_whitespace=False, max_length=PROFILE_ENTRY_MAX_CHARS
        )
        mode = serializers.ChoiceField(choices=list(services.MODES), default="append")

    @extend_schema(
        request=SectionInput,
        responses=inline_serializer(
            "SectionOutput",
            fields={
                "key": serializers.CharField(),
                "title": serializers.CharField(),
                "content": serializers.CharField(),
            },
        ),
    )
    def patch(self, request, key: str):
        try:
            section = section_for(key)
        except ValueError as exc:
            return refused({"key": [str(exc)]})
        data = self.SectionInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            row = services.profile_update(
                owner=request.user,
                section=section.key,
                actor=f"api:{request.user.get_username()}",
                **data.validated_data,
            )
        except ValueError as exc:
            return refused({"entry": [str(exc)]})
        return Response({"key": section.key, "title": section.title, "content": row.content})
