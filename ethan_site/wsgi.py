"""WSGI entry point: `gunicorn ethan_site.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

from ethan_shared.config import settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
# A bad setting stops the server with one line naming it, not an error on every request.
settings_or_exit("ethan (wsgi)")

application = get_wsgi_application()
