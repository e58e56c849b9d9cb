"""Access logs without query strings: a query holds what a person typed (GET
/api/sessions?q=…, a search on 我的记忆), which is theirs, not the server log's.

gunicorn writes its own access log, formatted in gunicorn.conf.py with the path alone. The
servers that log requests through Python's logging are filtered here: uvicorn (`ethan mcp
--http`, or an ASGI server in front of ethan_site.asgi) and Django's runserver.
"""

from __future__ import annotations

import logging
import re

# Each of them logs the path (or the whole request line) as one of the record's arguments.
ACCESS_LOGGERS = ("uvicorn.access", "django.server")
_QUERY = re.compile(r"\?[^\s\"]*")


class WithoutQueries(logging.Filter):
    """Drops `?…` from every text argument of a request's log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _QUERY.sub("", arg) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


def access_logs_without_queries() -> None:
    """On the loggers themselves, not their handlers: a server configuring its logging after
    Django (uvicorn.run does) replaces the handlers and keeps a logger's filters."""
    for name in ACCESS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, WithoutQueries) for f in logger.filters):
            logger.addFilter(WithoutQueries())
