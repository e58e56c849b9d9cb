"""The console: a conversation at the terminal, with the original CLI's slash commands.

On a terminal it has line editing and history (prompt_toolkit) and renders replies as Markdown
(rich) while they are written; on a pipe it reads and writes plain lines, so it can be
scripted. Each message goes through the same turn as the API and Lark (agent_app.turn): the
console prints its deltas as they arrive. Ctrl-C while the model writes stops that reply;
what was shown is kept as the reply, marked interrupted, and the console goes on.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError

import embedder
import ethan_llm
from agent_app.lifecycle import session_finish, sessions_finish_pending
from agent_app.turn import (
    Failed,
    model_choose,
    turn_interrupted,
    turn_plan,
)
from channels_app.turns import TURN_REFUSALS, Drain, failure, refusal, turn_open
from ethan_shared.private import private_file
from ethan_shared.queue import run_deferred
from sessions_app import display, selectors, services
from sessions_app.errors import SessionError
from sessions_app.models import ChatSession, Message

if TYPE_CHECKING:
    from rich.console import Console as RichConsole
    from rich.console import ConsoleOptions, RenderResult

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

# Said while an embedded console writes a conversation's memory before it exits / at start.
REMEMBERING = "Remembering this conversation…"
REMEMBERING_EARLIER = "Remembered your earlier conversation."

# How many earlier messages to show when a session is resumed.
RESUME_TAIL = 6


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

    def reply_delta(self, text: str) -> None:
        """A piece of the reply, as the model writes it."""
        self.stdout.write(text)
        self.stdout.flush()

    def reply_end(self, shown: str) -> None:
        """The reply is over (finished, failed or stopped); `shown` is all that was printed."""
        if shown:
            self.stdout.write("\n")
            self.stdout.flush()

    def keys_unechoed(self) -> contextlib.AbstractContextManager[None]:
        """While a reply is on its way: on a pipe there is nothing to hide."""
        return contextlib.nullcontext()


class TerminalIO(PlainIO):
    """A terminal: prompt_toolkit for editing and history, rich for Markdown replies."""

    def __init__(self, stdin: TextIO, stdout: TextIO, history: Path):
        super().__init__(stdin, stdout)
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory
        from rich.console import Console as RichConsole

        # Created 0600: what a person typed is theirs alone (ethan_shared.private).
        self.prompt = PromptSession(history=FileHistory(str(private_file(history))))
        self.rich = RichConsole(file=stdout)
        self.live = None  # the reply being written, redrawn in place
        self.live_text = ""

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

    def reply_delta(self, text: str) -> None:
        # The Markdown so far, redrawn in place as it grows (rich's Live display): only as much
        # of its end as the screen holds. A redraw moves the cursor up over what it drew last;
        # lines that scrolled off the top cannot be reached, so a taller display would be
        # drawn again below them, the reply repeated in the scrollback at every refresh.
        from rich.live import Live

        if self.live is None:
            self.live = Live(console=self.rich, refresh_per_second=12, transient=True)
            self.live.start()
            self.live_text = ""
        self.live_text += text
        self.live.update(_ScreenfulTail(self.live_text))

    def reply_end(self, shown: str) -> None:
        if self.live is not None:
            # The display is taken down and the whole reply printed once, as the scrollback
            # keeps it.
            from rich.markdown import Markdown

            self.live.stop()
            self.live = None
            self.rich.print(Markdown(self.live_text))

    @contextlib.contextmanager
    def keys_unechoed(self) -> Iterator[None]:
        """While a reply is on its way the terminal does not echo keys (Ctrl-C's "^C", or a
        line typed ahead). rich redraws the reply in place, counting the lines it drew; an
        echo it did not draw moves the cursor, most often onto a new line when the reply fills
        its last line to the edge, and the redraw then lands below the old one: the reply
        shown twice. Ctrl-C still interrupts (ISIG stays on)."""
        import termios

        fd = self.stdin.fileno()
        saved = termios.tcgetattr(fd)
        quiet = list(saved)
        quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)  # the local modes
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
        try:
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, saved)


class _ScreenfulTail:
    """The end of a Markdown text, as many lines of it as fit above the screen's last row."""

    def __init__(self, text: str):
        self.text = text

    def __rich_console__(self, console: RichConsole, options: ConsoleOptions) -> RenderResult:
        from rich.markdown import Markdown
        from rich.segment import Segment

        lines = console.render_lines(Markdown(self.text), options.update(height=None), pad=False)
        for line in lines[-max(console.size.height - 1, 1) :]:
            yield from line
            yield Segment.line()


class TerminalClosed(Exception):
    """The console's terminal was closed (SIGHUP)."""


def _hang_up(signum: int, frame: object) -> None:
    # While prompt_toolkit waits for a line its event loop runs in this thread: raised inside
    # one of the loop's callbacks (a redraw, a key read), the exception was the loop's, which
    # prompt_toolkit shows as "Press ENTER to continue..." to a terminal nobody reads, and the
    # console hung there, its conversation never remembered. The prompt is ended through its
    # loop instead (call_soon_threadsafe is safe in a signal handler), and raises it there.
    current = sys.modules.get("prompt_toolkit.application.current")  # no terminal: not loaded
    app = current.get_app_or_none() if current is not None else None
    if app is not None and app.is_running and app.loop is not None:
        app.loop.call_soon_threadsafe(_prompt_end, app)
        return
    raise TerminalClosed


def _prompt_end(app: Any) -> None:
    if not app.is_done:
        app.exit(exception=TerminalClosed())


@dataclass
class Console:
    owner: AbstractBaseUser
    io: PlainIO
    # --model, if given; otherwise the one rule of agent_app.turn.model_choose decides (the
    # session's model, the person's own setting, ETHAN_MODEL, a provider with a key, offline).
    explicit_model: str | None = None
    mode: str = ChatSession.Mode.WORK
    session: ChatSession = field(init=False)

    def __post_init__(self) -> None:
        self.session = self._new_session()

    @property
    def model(self) -> str:
        """The model the next message goes to."""
        return model_choose(owner=self.owner, session=self.session, explicit=self.explicit_model)

    def _new_session(self) -> ChatSession:
        # No model yet: the turn's plan writes the one it chose with the first message.
        return services.session_start(
            owner=self.owner, mode=self.mode, channel=ChatSession.Channel.CONSOLE
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
        session_finish(session=self.session, now=True)

    def run(self) -> None:
        if settings.ETHAN_EMBEDDED and sessions_finish_pending(owner=self.owner):
            # An earlier console's end-of-session work did not run (the model was down when
            # it exited): no worker or sweep runs here, so it is done now.
            self.say(REMEMBERING_EARLIER)
        model = self.model
        embedder.preload_in_background()  # loaded while the person types the first message
        self._end_on_hang_up()
        if not self.session.is_persisted:
            self.say(f"Ethan ({model}): new session {self.session.id}. /help for commands.")
        if ethan_llm.provider_for(model) == "offline":
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
        except TerminalClosed:
            pass  # nobody left to read: end the session as an exit would
        finally:
            self.close()

    def _end_on_hang_up(self) -> None:
        """A closed terminal (SIGHUP) ends the console as /exit does, so the conversation is
        still remembered; by default the signal would kill the process before it ends."""
        if hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, _hang_up)

    def chat(self, text: str) -> None:
        try:
            plan = turn_plan(
                owner=self.owner,
                session=self.session,
                text=text,
                mode=self.mode,
                model=self.explicit_model,
                channel=ChatSession.Channel.CONSOLE,
            )
            turn = turn_open(plan)
        except KeyboardInterrupt:
            self.say("(cancelled; nothing was saved)")
            return
        except TURN_REFUSALS as exc:
            # Another client (a second console, the API) mid-turn on this session, a message
            # refused, a database down: the words every door says.
            self.say(f"Error: {refusal(exc).detail}")
            if isinstance(exc, DatabaseError):  # the person's own database: its own words too
                self.say(f"({first_line(str(exc)) or type(exc).__name__})")
            return
        self.session = turn.session
        drain = Drain(show=self.io.reply_delta)
        try:
            with self.io.keys_unechoed():
                for event in turn:  # to its end: the session's claim is given back there
                    drain.take(event)
            answer = drain.ended()
            self.io.reply_end(answer.shown.text)
            if isinstance(answer.end, Failed):
                failed = answer.end
                self.say(f"Error: {failure(failed).detail}")
                if failed.kind == "database":  # the person's own database: its words
                    self.say(f"({first_line(failed.detail)})")
                self.say(f"(your message is saved in {failed.session_id})")
        except KeyboardInterrupt:
            # Ctrl-C while the model writes: that reply stops, what was shown is kept (the
            # words after the last tool step are the reply).
            turn.close()
            self.io.reply_end(drain.shown.text)
            turn_interrupted(session=turn.session, shown=drain.shown.reply)
            if drain.shown.reply:
                self.say(f"(stopped; the reply so far is saved in {turn.session.id})")
            else:
                self.say(f"(cancelled; your message is saved in {turn.session.id})")
            return
        finally:
            # Memory work queued by this turn runs now that the reply is on screen.
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
        if settings.ETHAN_EMBEDDED and self.session.is_persisted:
            # Embedded, the session's episode and last facts are written here, before the
            # process ends (with a broker, a worker does it): say why the exit waits. A closed
            # terminal cannot be written to; the work is done all the same.
            with contextlib.suppress(OSError):
                self.say(REMEMBERING)
        run_deferred()
        if self.session.is_persisted:
            again = ["-r", self.session.id]
            if self.owner.get_username() != services.local_username():
                again += ["--user", self.owner.get_username()]  # started with --user
            resume = command_line(again)
            self.say(f"Saved as {self.session.id}. Resume with: {resume}")


def command_line(args: list[str]) -> str:
    """The command that runs `ethan ARGS` here, for a hint such as "Resume with: …".

    `ethan` when the `ethan` found on PATH is this very script. Otherwise the console was
    started another way: by `make chat` (its recipe sets ETHAN_STARTED_BY=make, and its folder
    is the project's), so `make chat ARGS="…"`, the way the person started it; else by the
    script's own path (a venv that is not on PATH), so that absolute path, which works from any
    folder. (Not make's own MAKELEVEL: every process under any make has it, a test run too.)
    """
    script = _this_script()
    on_path = shutil.which("ethan")
    if script is None or (on_path and _same_file(on_path, script)):
        return shlex.join(["ethan", *args])
    project = Path(__file__).resolve().parent.parent  # where `make chat` runs
    if os.environ.get("ETHAN_STARTED_BY") == "make" and Path.cwd().resolve() == project:
        # `make -C DIR chat` runs here while the shell stays where it was (its $PWD).
        shell_dir = os.environ.get("PWD", "")
        folder = [] if shell_dir and _same_file(shell_dir, project) else ["-C", str(project)]
        return shlex.join(["make", *folder, "chat"]) + f' ARGS="{shlex.join(args)}"'
    return shlex.join([str(script), *args])


def _this_script() -> Path | None:
    """The `ethan` script that started this process, or the one beside its interpreter (for
    `python -m ethan_site.cli` and `manage.py`); None if there is none."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    for candidate in (started, Path(sys.executable).parent / "ethan"):
        if candidate is not None and candidate.name == "ethan" and candidate.is_file():
            return candidate.resolve()
    return None


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def first_line(text: str) -> str:
    return next(iter(text.strip().splitlines()), "")


def make_io(stdin: TextIO, stdout: TextIO, home: Path) -> PlainIO:
    if stdin is sys.stdin and stdin.isatty() and stdout.isatty():
        return TerminalIO(stdin, stdout, history=home / "history")
    return PlainIO(stdin, stdout)
