from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token

from sessions_app.services import local_user_get_or_create


class Command(BaseCommand):
    help = "Print the API token of a user (made with the user on first use): ethan token NAME."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "user",
            nargs="?",
            default=None,
            help="the user name (default: the console's local user)",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="replace the token with a new one (the old one stops working)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = local_user_get_or_create(username=options["user"])
        if options["reset"]:
            Token.objects.filter(user=user).delete()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
