"""GET /api/episodes?q=&limit=: search by words, or the newest first without q."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from episodes_app import selectors
from episodes_app.models import Episode


class EpisodeOutput(serializers.ModelSerializer):
    session_id = serializers.CharField(source="session_ref")

    class Meta:
        model = Episode
        fields = ["id", "session_id", "summary", "timestamp", "model", "turn_count", "keywords"]


class EpisodesApi(APIView):
    class EpisodesQuery(serializers.Serializer):
        q = serializers.CharField(required=False, allow_blank=True, max_length=500)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100, default=20)

    @extend_schema(parameters=[EpisodesQuery], responses=EpisodeOutput(many=True))
    def get(self, request):
        params = self.EpisodesQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        query = params.validated_data.get("q", "").strip()
        limit = params.validated_data["limit"]
        if query:
            found = selectors.episodes_search(owner=request.user, query=query, limit=limit)
            episodes = [item.episode for item in found]
        else:
            episodes = selectors.episodes_recent(owner=request.user, limit=limit)
        return Response(EpisodeOutput(episodes, many=True).data)
