from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sessions_app.services import local_user_get_or_create


class Command(BaseCommand):
    help = (
        "Serve the person's memory to MCP hosts: over stdio for a host that starts it "
        "(ethan mcp: yours, the console's person; --user NAME: another's), or over "
        "streamable HTTP at /mcp on a port of its own, each request authenticated by its "
        "Bearer API token (ethan mcp --http). The web server (ethan serve, make serve) serves "
        "/mcp too, beside every other door and with OAuth for hosts that connect by URL. "
        "docs/mcp.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user",
            default=None,
            help="stdio: whose memory (default: the console's local user, made on first use)",
        )
        parser.add_argument(
            "--http",
            action="store_true",
            help="serve streamable HTTP at /mcp instead of stdio (every person, by token)",
        )
        parser.add_argument(
            "--bind",
            default=None,
            help="HOST:PORT for --http (default ETHAN_MCP_BIND, 127.0.0.1:8001)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from channels_app.mcp_server.server import http_app, run_stdio

        if options["http"]:
            if options["user"]:
                raise CommandError("--user is for stdio; over HTTP each token names its person")
            host, port = _bind(options["bind"] or settings.ETHAN_MCP_BIND)
            import uvicorn

            # Logs go to stderr, as every process of Ethan's does.
            uvicorn.run(http_app(host=host, port=port), host=host, port=port, log_level="info")
            return
        if options["bind"]:
            raise CommandError("--bind is for --http")
        try:
            owner = local_user_get_or_create(username=options["user"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        # stdout is the protocol's: nothing else may be written to it from here on.
        run_stdio(owner)


def _bind(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CommandError(f"--bind must be HOST:PORT, not {value!r}")
    return host.strip("[]"), int(port)
