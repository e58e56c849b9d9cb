from __future__ import annotations

import argparse
import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


def bind_address(value: str) -> tuple[str, int]:
    """HOST:PORT ([::1]:8000 for IPv6) as (host, port); a usage error otherwise, before
    anything is written."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)


def process_count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {value!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return count


class Command(BaseCommand):
    help = (
        "Serve every door on one port: the pages, /api, /v1, /mcp, the Lark webhook and "
        "/healthz (ethan_site.asgi under uvicorn). docs/operations.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--bind",
            type=bind_address,
            default=None,
            help="HOST:PORT (default ETHAN_BIND, 127.0.0.1:8000)",
        )
        parser.add_argument(
            "--workers",
            type=process_count,
            default=int(os.environ.get("WEB_CONCURRENCY") or 1),
            help="processes on the port, one per core at most (default WEB_CONCURRENCY, else 1); "
            "with more than one, /mcp keeps no session (docs/operations.md)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ethan_site.serve import serve

        bind = options["bind"]
        if bind is None:  # ETHAN_BIND, read from the settings once they are loaded
            try:
                bind = bind_address(settings.ETHAN_BIND)
            except argparse.ArgumentTypeError as exc:
                raise CommandError(f"ETHAN_BIND {exc}") from None
        serve(host=bind[0], port=bind[1], workers=options["workers"])
