"""The console: a conversation at the terminal, with the original CLI's slash commands.

It owns the loop and the session bookkeeping (lazy persistence, resume, clean-up on exit). What
answers a message is `reply`, a callable given to it: the turn service once the agent lands.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from django.contrib.auth.models import AbstractBaseUser

from ethan_site.queue import run_deferred
from sessions_app import display, selectors, services
from sessions_app.errors import SessionError
from sessions_app.models import ChatSession, Message

HELP = """Commands:
  /sessions      list recent sessions
  /resume ID     continue a session (full id, 'last', or a unique tail like d139)
  /new           start a new session
  /help          this help
  /exit          leave (also /quit or Ctrl-D)"""

# How many earlier messages to show when a session is resumed.
RESUME_TAIL = 6

Reply = Callable[[ChatSession, str], str | None]


@dataclass
class Console:
    owner: AbstractBaseUser
    reply: Reply
    stdin: TextIO
    stdout: TextIO
    model: str = ""
    mode: str = ChatSession.Mode.WORK
    session: ChatSession = field(init=False)

    def __post_init__(self) -> None:
        self.session = self._new_session()

    def _new_session(self) -> ChatSession:
        return services.session_start(
            owner=self.owner,
            model=self.model,
            mode=self.mode,
            channel=ChatSession.Channel.CONSOLE,
        )

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def resume(self, ref: str) -> None:
        """Switch to an existing session; raises SessionError for a bad reference."""
        session = selectors.session_resolve(owner=self.owner, ref=ref)
        self._leave_session()
        self.session = session
        self.say(f"Resumed {session.id}: {session.title or '(untitled)'}")
        tail = list(selectors.session_messages(session=session).order_by("-seq")[:RESUME_TAIL])
        for message in reversed(tail):
            if message.role in (Message.Role.USER, Message.Role.ASSISTANT) and message.content:
                self.say(f"  {message.role}: {display.one_line(message.content)}")

    def _leave_session(self) -> None:
        services.session_end(session=self.session)

    def run(self) -> None:
        if not self.session.is_persisted:
            self.say(f"Ethan: new session {self.session.id}. /help for commands.")
        try:
            while True:
                line = self.read_line()
                if line is None:  # end of input
                    break
                text = line.strip()
                if not text:
                    continue
                if text.startswith("/"):
                    if not self.command(text):
                        break
                    continue
                self.chat(text)
        except KeyboardInterrupt:
            self.say("")
        finally:
            self.close()

    def read_line(self) -> str | None:
        """The next line typed, or None at the end of input (Ctrl-D, or the pipe is empty)."""
        if self.stdin is sys.stdin and self.stdin.isatty():
            # input() on a terminal gives line editing and history through readline.
            # readline is not on every platform; plain input() still works without it.
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401
            try:
                return input("> ")
            except EOFError:
                self.say("")
                return None
        line = self.stdin.readline()
        return None if line == "" else line

    def chat(self, text: str) -> None:
        answer = self.reply(self.session, text)
        if answer:
            self.say(answer)
        # Memory work queued by this turn runs now that the reply is on screen (embedded mode).
        run_deferred()

    def command(self, text: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            self.say(HELP)
        elif name == "/sessions":
            self.say(display.session_table(selectors.session_list(owner=self.owner)))
        elif name == "/new":
            self._leave_session()
            self.session = self._new_session()
            self.say(f"New session {self.session.id}.")
        elif name == "/resume":
            if not argument:
                self.say("Usage: /resume ID (a full id, 'last', or a unique tail)")
            else:
                try:
                    self.resume(argument)
                except SessionError as exc:
                    self.say(f"Error: {exc}")
        else:
            self.say(f"Unknown command {name}. /help lists them.")
        return True

    def close(self) -> None:
        self._leave_session()
        # The design's exit clean-up: sessions that never got a message leave no trace.
        services.sessions_cleanup_empty(owner=self.owner)
        run_deferred()
        if self.session.is_persisted:
            self.say(f"Saved as {self.session.id}. Resume with: ethan -r {self.session.id}")
