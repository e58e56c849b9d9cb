from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent_app.history_console import history_import_command, imported_embed, progress_bar
from agent_app.transfer import LayoutError, layout_import, layout_read
from sessions_app.services import local_user_get_or_create


def message_progress(stream: TextIO):
    """A progress bar of the messages written, on `stream` when it is a terminal (none when
    the output goes to a file or a pipe)."""
    return progress_bar(stream, "messages")


class Command(BaseCommand):
    help = (
        "Import the ~/.ethan file layout (sessions.db, memory/*.json, memory/user_profile.md, "
        "config.yaml) for one user: all or nothing, and safe to repeat. With --from chatgpt or "
        "--from claude PATH: another assistant's export, then learn from it (docs/import.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--home", type=Path, default=None, help="the folder to read (default: $ETHAN_HOME)"
        )
        parser.add_argument(
            "--user", default=None, help="whose memory this is (default: the console's local user)"
        )
        parser.add_argument(
            "--from",
            dest="source",
            choices=["chatgpt", "claude"],
            help="import this assistant's export (a zip or its conversations.json) instead",
        )
        parser.add_argument("path", nargs="?", help="the export, with --from")
        parser.add_argument(
            "--no-learn", action="store_true", help="with --from: import without learning yet"
        )
        parser.add_argument(
            "--learn",
            action="store_true",
            help="learn from the imported conversations not learnt yet (after a stop)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="check everything and print the summary; write nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["source"] or options["learn"]:
            owner = local_user_get_or_create(username=options["user"])
            history_import_command(self, owner, options)
            return
        if options["path"]:
            raise CommandError("a file to import needs --from chatgpt or --from claude")
        home = (options["home"] or settings.ETHAN_HOME).expanduser()
        if not home.is_dir():
            raise CommandError(f"{home} is not a folder")
        try:
            layout = layout_read(home)
        except LayoutError as exc:
            raise CommandError(f"nothing imported: {home}/{exc}") from None
        owner = local_user_get_or_create(username=options["user"])
        try:
            with message_progress(self.stderr._out) as progress:
                report = layout_import(
                    owner=owner, layout=layout, dry_run=options["dry_run"], progress=progress
                )
        except LayoutError as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        for note in layout.notes:
            self.stdout.write(f"note: {note}")
        verb = "would import" if options["dry_run"] else "imported"
        self.stdout.write(f"{verb} for {owner.get_username()} from {home}:")
        for kind, count in report.created.items():
            self.stdout.write(
                f"  {kind}: {count} new, {report.unchanged.get(kind, 0)} already there"
            )
        if options["dry_run"]:
            self.stdout.write("dry run: nothing was written")
        else:
            imported_embed(self, owner)
