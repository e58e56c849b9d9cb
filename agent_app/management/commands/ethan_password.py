from __future__ import annotations

import getpass
import sys
from typing import Any, TextIO

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sessions_app.services import local_user_get_or_create, local_user_password_set


class Command(BaseCommand):
    help = (
        "Set your password for the pages (/accounts/login/, /memory/, /profile/): the console "
        "user's, made on first use, or --user NAME's. Asked twice on a terminal, else read "
        "from the first line of standard input."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user",
            default=None,
            help="whose password (default: the console's user: ETHAN_USER, else the OS login)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user = local_user_get_or_create(username=options["user"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        name = user.get_username()
        password = _read_password(options.get("stdin") or sys.stdin, name)
        if not password:
            raise CommandError("the password is empty; nothing changed")
        try:
            local_user_password_set(user=user, password=password)
        except ValidationError as exc:
            raise CommandError(f"{' '.join(exc.messages)} Nothing changed.") from None
        self.stdout.write(f"Password set. Sign in at /accounts/login/ as {name}.")


def _read_password(stdin: TextIO, name: str) -> str:
    """Twice without echo on a terminal (a typo would lock the person out); one line from a
    pipe (`ethan password < file`, a script), its line ending dropped."""
    if stdin is sys.stdin and stdin.isatty():
        try:
            first = getpass.getpass(f"New password for {name}: ")
            if not first:
                return ""
            again = getpass.getpass("The same again: ")
        except (EOFError, KeyboardInterrupt):
            sys.stderr.write("\n")
            raise CommandError("no password given; nothing changed") from None
        if first != again:
            raise CommandError("the two passwords differ; nothing changed")
        return first
    return stdin.readline().rstrip("\r\n")
