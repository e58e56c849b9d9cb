"""The `ethan` console script, with the original CLI's words.

    ethan                          a new conversation at the terminal (--model, --mode)
    ethan -r last | -r ID          continue one (a full id, 'last', or a unique tail like d139)
    ethan chat [...]               the same, spelled out
    ethan session list|show|delete|search ...   your conversations
    ethan token [--reset]          your API token, for a chat app (/v1), the API, MCP over HTTP
    ethan password                 set your password for the pages (/memory/, /profile/)
    ethan mcp [--http]             your memory for an MCP host over stdio (--http: at /mcp)
    ethan serve [--bind HOST:PORT]   every door on one port: pages, /api, /v1, /mcp, Lark
    ethan import|export [--home DIR]   from or to the original CLI's folder
    ethan import --from chatgpt|claude PATH   your history from another assistant, then learnt
    ethan manage COMMAND [...]     any manage.py command (migrate, createsuperuser, ...)
    ethan --version                the installed version

You are one person at every door: the console's user, ETHAN_USER or else the OS login name.
The console, session, token, password, mcp, import and export take --user NAME for another.

On the embedded SQLite database it applies pending migrations first, so a fresh install works
without a separate set-up step; a shared PostgreSQL is migrated by its operator (`make migrate`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import version
from typing import Any

# Words that name a management command of their own; anything else goes to ethan_chat.
SUBCOMMANDS = {
    "chat": "ethan_chat",
    "session": "ethan_session",
    "import": "ethan_import",
    "export": "ethan_export",
    "token": "ethan_token",
    "password": "ethan_password",
    "mcp": "ethan_mcp",
    "serve": "ethan_serve",
}


def route(argv: list[str]) -> list[str]:
    """`ethan` arguments → manage.py arguments."""
    if argv and argv[0] == "manage":
        return argv[1:] or ["help"]
    if argv and argv[0] in SUBCOMMANDS:
        return [SUBCOMMANDS[argv[0]], *argv[1:]]
    if argv and argv[0] in ("-h", "--help", "help"):
        return ["help_ethan"]
    if argv == ["--version"]:
        return ["version_ethan"]
    return ["ethan_chat", *argv]


def _migrate_embedded() -> None:
    from django.conf import settings
    from django.core.management import call_command
    from django.db import DEFAULT_DB_ALIAS, connections
    from django.db.migrations.executor import MigrationExecutor

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        return
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        # One line on a fresh home (stderr: stdout may be piped, `ethan export > …`), rather
        # than a line per migration: they are an implementation detail, not the person's work.
        sys.stderr.write("Preparing the database…\n")
        sys.stderr.flush()
        call_command("migrate", interactive=False, verbosity=0)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
    from ethan_shared.config import ConfigError

    args = route(argv)
    if args == ["help_ethan"]:
        # The usage lines and who "you" are: the docstring's second and third paragraphs.
        sys.stdout.write(f"{USAGE}\n\n" + "\n\n".join(__doc__.split("\n\n")[1:3]) + "\n")
        return
    if args == ["version_ethan"]:
        sys.stdout.write(f"ethan {version('ethan')}\n")
        return
    if argv and not argv[0].startswith("-") and args[0] == "ethan_chat" and argv[0] != "chat":
        # A word that names no command is a mistake, not a message for the console.
        sys.stderr.write(
            f"{USAGE}\nethan: error: {argv[0]!r} is not a command (ethan --help lists them)\n"
        )
        sys.exit(2)
    try:
        if argv and argv[0] == "manage":
            # Any manage.py command, as Django's own utility runs it (its options included).
            import django
            from django.core.management import ManagementUtility

            django.setup()
            _migrate_embedded()
            ManagementUtility(["ethan manage", *args]).execute()
        else:
            # "ethan" for the console, "ethan serve" and so on for the others.
            console = args[0] == "ethan_chat" and argv[:1] != ["chat"]
            prog = "ethan" if console else f"ethan {argv[0]}"
            _run_command(prog, args[0], args[1:])
    except ConfigError as exc:
        sys.stderr.write(f"ethan: configuration error: {exc}\n")
        sys.exit(1)


USAGE = "usage: ethan [COMMAND] [ARGUMENTS]   (ethan COMMAND --help: one command's options)"

# Options every Django command has. `ethan` accepts them (--traceback shows a stack trace, as in
# manage.py) but does not show them: they are Django's, not the person's.
DJANGO_OPTIONS = frozenset(
    {
        "--version",
        "--verbosity",
        "--settings",
        "--pythonpath",
        "--traceback",
        "--no-color",
        "--force-color",
        "--skip-checks",
    }
)


def _run_command(prog: str, name: str, argv: list[str]) -> None:
    """Run the management command `name` as the program `prog`: its own usage and options, its
    errors as `prog: message`. Help and a mistyped argument print and exit before anything is
    written (see _home_writes_held); the database is migrated once the arguments are read."""
    import argparse

    from django.core.management import get_commands, load_command_class
    from django.core.management.base import CommandError, SystemCheckError
    from django.db import connections

    with _home_writes_held() as held:
        import django

        django.setup()
    command = load_command_class(get_commands()[name], name)
    # Usage errors: argparse's usage line and message, exit status 2 (not a CommandError).
    command._called_from_command_line = True
    parser = command.create_parser("ethan", prog.removeprefix("ethan").strip())
    parser.prog = prog
    for action in parser._actions:
        if DJANGO_OPTIONS.intersection(action.option_strings):
            action.help = argparse.SUPPRESS
        if isinstance(action, argparse._VersionAction):
            action.version = f"ethan {version('ethan')}"
    options = parser.parse_args(argv)

    held.write()
    _migrate_embedded()
    cmd_options = vars(options)
    args = cmd_options.pop("args", ())
    try:
        command.execute(*args, **cmd_options)
    except CommandError as exc:
        if options.traceback:
            raise
        if isinstance(exc, SystemCheckError):  # formatted already, one problem a line
            command.stderr.write(str(exc), lambda text: text)
        else:
            command.stderr.write(f"{prog}: {exc}")
        sys.exit(exc.returncode)
    finally:
        connections.close_all()


class _HeldWrites:
    """The writes ethan_site.settings makes as it is read, held back (see _home_writes_held)."""

    STAND_IN_KEY = "ethan-reading-its-arguments"

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def holding(self, write: Callable[..., Any], stand_in: Any) -> Callable[..., Any]:
        def held(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((write, args, kwargs))
            return stand_in

        return held

    def write(self) -> None:
        """Make the writes, in the settings' order, and give the settings what they return."""
        from django.conf import settings

        from ethan_shared.config import secret_key_file
        from ethan_shared.private import home_tighten

        for write, args, kwargs in self.calls:
            result = write(*args, **kwargs)
            if write is secret_key_file:
                settings.SECRET_KEY = result
            elif write is home_tighten and result:
                sys.stderr.write(result + "\n")
        self.calls.clear()


@contextlib.contextmanager
def _home_writes_held() -> Iterator[_HeldWrites]:
    """While the settings are read, hold back what reading them writes to the home (the
    folder and the SQLite file made private, the install's secret key made): `ethan serve
    --help` or a mistyped option on a fresh install must leave no ~/.ethan behind. The
    settings get a stand-in key until held.write() makes the real one."""
    from ethan_shared import config, private

    held = _HeldWrites()
    real = (private.private_file, private.home_tighten, config.secret_key_file)
    private.private_file = held.holding(private.private_file, None)
    private.home_tighten = held.holding(private.home_tighten, None)
    config.secret_key_file = held.holding(config.secret_key_file, held.STAND_IN_KEY)
    try:
        yield held
    finally:
        private.private_file, private.home_tighten, config.secret_key_file = real


if __name__ == "__main__":
    main()
