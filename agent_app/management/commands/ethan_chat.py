from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent_app.console import Console
from agent_app.modes import mode_parse
from sessions_app import services
from sessions_app.errors import SessionError
from sessions_app.models import ChatSession, Message


def reply_saved_only(session: ChatSession, text: str) -> str:
    """Until the agent turn lands: store the message (nothing is lost) and say so plainly."""
    services.message_append(session=session, role=Message.Role.USER, content=text)
    return f"(saved to {session.id}; the agent turn is not built yet, so there is no answer)"


class Command(BaseCommand):
    help = "Talk with Ethan at the terminal. Slash commands: /sessions /resume /new /help /exit."
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-r",
            "--resume",
            metavar="ID",
            help="continue a session: 'last', a full id, or a unique tail",
        )
        parser.add_argument("--model", default=None, help="the chat model id")
        parser.add_argument("--mode", default="work", help="work, or companion (陪伴)")
        parser.add_argument(
            "--user", default=None, help="whose memory (default: the OS login name)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            mode = mode_parse(options["mode"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        owner = services.local_user_get_or_create(username=options["user"])
        # The console writes its own line endings (and a prompt that must not end one).
        self.stdout.ending = ""
        console = Console(
            owner=owner,
            reply=reply_saved_only,
            stdin=options.get("stdin") or sys.stdin,
            stdout=self.stdout,
            model=options["model"] or settings.ETHAN_MODEL,
            mode=mode,
        )
        if options["resume"]:
            try:
                console.resume(options["resume"])
            except SessionError as exc:
                raise CommandError(str(exc)) from None
        console.run()
