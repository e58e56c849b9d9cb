"""The console: a conversation at the terminal, with the original CLI's slash commands.

On a terminal it has line editing and history (prompt_toolkit) and renders replies as Markdown
(rich); on a pipe it reads and writes plain lines, so it can be scripted. Each message goes
through the same turn service as the API and Lark.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError

import llm
from agent_app.services import TurnInputError, TurnResult, session_finish
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

OFFLINE_NOTE = (
    "Using the offline model: a rule-based stand-in, not a language model. For real answers set "
    "ANTHROPIC_API_KEY, OPENAI_API_KEY or GOOGLE_API_KEY (or ETHAN_MODEL, e.g. "
    "openai:llama3.1 with OPENAI_BASE_URL for a local server) in the environment or in "
    "$ETHAN_HOME/config.yaml."
)

# How many earlier messages to show when a session is resumed.
RESUME_TAIL = 6

Turn = Callable[..., TurnResult]


class PlainIO:
    """A pipe: plain lines in, plain lines out."""

    def __init__(self, stdin: TextIO, stdout: TextIO):
        self.stdin, self.stdout = stdin, stdout

    def read(self) -> str | None:
        line = self.stdin.readline()
        return None if line == "" else line

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def reply(self, text: str) -> None:
        self.say(text)


class TerminalIO(PlainIO):
    """A terminal: prompt_toolkit for editing and history, rich for Markdown replies."""

    def __init__(self, stdin: TextIO, stdout: TextIO, history: Path):
        super().__init__(stdin, stdout)
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory
        from rich.console import Console as RichConsole

        history.parent.mkdir(parents=True, exist_ok=True)
        self.prompt = PromptSession(history=FileHistory(str(history)))
        self.rich = RichConsole(file=stdout)

    def read(self) -> str | None:
        while True:
            try:
                return self.prompt.prompt("> ")
            except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, as in a shell
                continue
            except EOFError:
                return None

    def reply(self, text: str) -> None:
        from rich.markdown import Markdown

        self.rich.print(Markdown(text))


@dataclass
class Console:
    owner: AbstractBaseUser
    turn: Turn
    io: PlainIO
    model: str = ""
    mode: str = ChatSession.Mode.WORK
    session: ChatSession = field(init=False)

    def __post_init__(self) -> None:
        self.model = self.model or llm.default_model()
        self.session = self._new_session()

    def _new_session(self) -> ChatSession:
        return services.session_start(
            owner=self.owner,
            model=self.model,
            mode=self.mode,
            channel=ChatSession.Channel.CONSOLE,
        )

    def say(self, text: str) -> None:
        self.io.say(text)

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
        """The session is over for now (exit, /new, /resume): mark it ended and, after the
        reply, write its episode (sessions with fewer than two rounds get none)."""
        session_finish(session=self.session)

    def run(self) -> None:
        if not self.session.is_persisted:
            self.say(f"Ethan ({self.model}): new session {self.session.id}. /help for commands.")
        if llm.provider_for(self.model) == "offline":
            self.say(OFFLINE_NOTE)
        try:
            while True:
                line = self.io.read()
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

    def chat(self, text: str) -> None:
        try:
            result = self.turn(
                owner=self.owner,
                session=self.session,
                text=text,
                mode=self.mode,
                model=self.model,
                channel=ChatSession.Channel.CONSOLE,
            )
        except KeyboardInterrupt:
            # Ctrl-C during the model call: the call is abandoned, the message is kept.
            self.say(f"(cancelled; your message is saved in {self.session.id})")
            return
        except services.SessionBusy:
            # Another client (a second console, the API) is mid-turn on this session.
            self.say(
                "Error: another reply on this session is still being written; "
                "your message was not saved: send it again"
            )
            return
        except (TurnInputError, llm.ModelError, DatabaseError) as exc:
            # A database error is named in one line, not dumped: the console stays open.
            prefix = "Error: the database failed: " if isinstance(exc, DatabaseError) else "Error: "
            first_line = next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__
            self.say(f"{prefix}{first_line}")
            stored = getattr(exc, "session", None)  # set once the message is committed
            if stored is not None:
                self.say(f"(your message is saved in {stored.id})")
            return
        self.session = result.session
        if result.reply:
            self.io.reply(result.reply)
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


def make_io(stdin: TextIO, stdout: TextIO, home: Path) -> PlainIO:
    if stdin is sys.stdin and stdin.isatty() and stdout.isatty():
        return TerminalIO(stdin, stdout, history=home / "history")
    return PlainIO(stdin, stdout)
