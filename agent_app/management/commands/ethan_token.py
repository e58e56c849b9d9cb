from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework.authtoken.models import Token

from sessions_app.services import local_user_get_or_create


class Command(BaseCommand):
    help = (
        "Print your API token (the console user's: ETHAN_USER, else the OS login name; made "
        "on first use), for a chat app (/v1), the REST API and MCP over HTTP. --user NAME: "
        "another person's."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user",
            default=None,
            help="whose token (default: the console's user, as for the console and `ethan mcp`)",
        )
        # `ethan token NAME`, as the docs once wrote it, still works.
        parser.add_argument("name", nargs="?", default=None, help="the same as --user NAME")
        parser.add_argument(
            "--reset",
            action="store_true",
            help="replace the token with a new one (the old one stops working)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["user"] and options["name"] and options["user"] != options["name"]:
            raise CommandError("name one person: --user NAME or NAME, not both")
        try:
            user = local_user_get_or_create(username=options["user"] or options["name"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["reset"]:
            Token.objects.filter(user=user).delete()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
