from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent_app.transfer import layout_export
from sessions_app.services import local_user_get_or_create


class Command(BaseCommand):
    help = "Export one user's memory as the ~/.ethan file layout (the inverse of ethan_import)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--home", type=Path, default=None, help="the folder to write (default: $ETHAN_HOME)"
        )
        parser.add_argument(
            "--user", default=None, help="whose memory (default: the console's local user)"
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="write into a folder that is not empty (files are replaced)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        home = (options["home"] or settings.ETHAN_HOME).expanduser()
        if home.exists() and not home.is_dir():
            raise CommandError(f"{home} is not a folder")
        if home.exists() and any(home.iterdir()) and not options["force"]:
            raise CommandError(
                f"{home} is not empty: nothing written (use --force to replace its files)"
            )
        owner = local_user_get_or_create(username=options["user"])
        counts = layout_export(owner=owner, home=home)
        summary = ", ".join(f"{count} {kind}" for kind, count in counts.items())
        self.stdout.write(f"exported {owner.get_username()} to {home}: {summary}")
