from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Serve every door on one port: the pages, /api, /v1, /mcp, the Lark webhook and "
        "/healthz (ethan_site.asgi under uvicorn). docs/operations.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--bind", default=None, help="HOST:PORT (default ETHAN_BIND, 127.0.0.1:8000)"
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=int(os.environ.get("WEB_CONCURRENCY") or 1),
            help="processes on the port, one per core at most (default WEB_CONCURRENCY, else 1); "
            "with more than one, /mcp keeps no session (docs/operations.md)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ethan_site.serve import serve

        value = options["bind"] or settings.ETHAN_BIND
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CommandError(f"--bind must be HOST:PORT, not {value!r}")
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        serve(host=host.strip("[]"), port=int(port), workers=options["workers"])
