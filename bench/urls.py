"""The product's URLs plus one bare endpoint, the floor the chat benchmark is measured
against. Served only under bench.settings, never by the product."""

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from ethan_site.urls import urlpatterns as product_urlpatterns


class BareApi(APIView):
    """Authenticated, throttled and rendered like every product endpoint, and nothing else:
    what a request costs before the turn does any work."""

    def post(self, request):
        return Response({"ok": True})


urlpatterns = [*product_urlpatterns, path("bench/bare", BareApi.as_view(), name="bench-bare")]
