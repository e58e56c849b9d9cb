from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

import ethan_llm
from agent_app.modes import mode_parse
from agent_app.turn import model_choose
from channels_app.console import Console, make_io
from sessions_app import services
from sessions_app.errors import SessionError


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
        parser.add_argument(
            "--model",
            default=None,
            help="the chat model id (default: ETHAN_MODEL, or the first "
            "provider with a key, or offline)",
        )
        parser.add_argument("--mode", default="work", help="work, or companion (陪伴)")
        parser.add_argument(
            "--user",
            default=None,
            help="whose memory (default: ETHAN_USER, else the OS login name; made on first use)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            mode = mode_parse(options["mode"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        owner = services.local_user_get_or_create(username=options["user"])
        try:
            # The same rule as every turn: --model, else the person's own setting (an imported
            # config.yaml), else ETHAN_MODEL, a provider with a key, offline. Said at start.
            ethan_llm.check_model(
                model_choose(owner=owner, session=None, explicit=options["model"])
            )
        except ethan_llm.ModelConfigError as exc:
            raise CommandError(str(exc)) from None
        # The real stream: the console writes its own line endings.
        stdout = options.get("stdout") or sys.stdout
        console = Console(
            owner=owner,
            explicit_model=options["model"],
            mode=mode,
            io=make_io(options.get("stdin") or sys.stdin, stdout, settings.ETHAN_HOME),
        )
        if options["resume"]:
            try:
                console.resume(options["resume"])
            except SessionError as exc:
                raise CommandError(str(exc)) from None
        console.run()
