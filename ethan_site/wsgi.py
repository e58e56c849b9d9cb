"""WSGI entry point: `gunicorn ethan_site.wsgi:application` (runserver's too). Ethan serves with
`ethan serve` (ASGI, ethan_site.asgi): under WSGI a turn door's stream is written whole before
its answer starts (channels_app.web), and every request holds a worker while it runs."""

import os

from django.core.wsgi import get_wsgi_application

from ethan_shared.config import settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
# A bad setting stops the server with one line naming it, not an error on every request.
settings_or_exit("ethan (wsgi)")

application = get_wsgi_application()
