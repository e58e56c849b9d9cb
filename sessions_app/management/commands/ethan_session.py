from __future__ import annotations

import sys
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from sessions_app import display, selectors, services
from sessions_app.errors import SessionError


def confirmed(prompt: str, stdin: TextIO, stdout: OutputWrapper) -> bool:
    """On a terminal, ask; on a pipe, a first line of "y" (or "yes") confirms."""
    if stdin.isatty():
        stdout.write(prompt, ending="")
        stdout.flush()
    answer = stdin.readline()
    return answer.strip().lower() in {"y", "yes"}


class Command(BaseCommand):
    help = "List, show, delete or search your sessions (layer 1)."
    # call_command(..., stdin=StringIO(...)) in tests stands for the terminal or pipe.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="whose sessions (default: the console's local user)")
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        listing = actions.add_parser("list", help="the latest sessions")
        listing.add_argument("--limit", type=int, default=None, help="how many (default 20)")

        show = actions.add_parser("show", help="one session's messages")
        show.add_argument("session_id", help="a full id, 'last', or a unique tail like d139")
        show.add_argument("--full", action="store_true", help="whole messages, not one line each")

        delete = actions.add_parser("delete", help="delete a session and its messages")
        delete.add_argument("session_id", help="a full id, 'last', or a unique tail like d139")
        delete.add_argument("--yes", "-y", action="store_true", help="do not ask")

        search = actions.add_parser("search", help="sessions whose title or messages contain TEXT")
        search.add_argument("text", nargs="+", help="the text to look for")
        search.add_argument("--limit", type=int, default=None, help="how many (default 20)")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = services.local_user_get_or_create(username=options["user"])
        action = options["action"]
        try:
            if action == "list":
                self._print(
                    display.session_table(
                        selectors.session_list(owner=owner, limit=options["limit"])
                    )
                )
            elif action == "show":
                session = selectors.session_resolve(owner=owner, ref=options["session_id"])
                messages = list(selectors.session_messages(session=session))
                self._print(display.session_detail(session, messages, full=options["full"]))
            elif action == "delete":
                self._delete(owner, options)
            elif action == "search":
                text = " ".join(options["text"])
                found = selectors.session_search(owner=owner, query=text, limit=options["limit"])
                self._print(
                    display.search_results(found) if found else f"Nothing matches {text!r}."
                )
        except (SessionError, ValueError) as exc:
            raise CommandError(str(exc)) from None

    def _delete(self, owner, options: dict[str, Any]) -> None:
        session = selectors.session_resolve(owner=owner, ref=options["session_id"])
        if not options["yes"]:
            prompt = (
                f"Delete {session.id} ({session.title or 'untitled'}, "
                f"{session.last_seq} messages)? [y/N] "
            )
            if not confirmed(prompt, options.get("stdin") or sys.stdin, self.stdout):
                raise CommandError(f"not deleted: {session.id} is unchanged")
        session_id = session.id  # delete() clears the instance's pk
        count = services.session_delete(session=session)
        self._print(f"Deleted {session_id} and its {count} messages.")

    def _print(self, text: str) -> None:
        self.stdout.write(text)
