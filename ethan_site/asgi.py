"""ASGI entry point, for servers such as uvicorn: `uvicorn ethan_site.asgi:application`."""

import os

from django.core.asgi import get_asgi_application

from ethan_site.config import settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
# A bad setting stops the server with one line naming it, not an error on every request.
settings_or_exit("ethan (asgi)")

application = get_asgi_application()
