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

import os
import sys
from importlib.metadata import version

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
    import django
    from django.core.management import ManagementUtility

    from ethan_site.config import ConfigError

    args = route(argv)
    if args == ["help_ethan"]:
        # The usage lines and who "you" are: the docstring's second and third paragraphs.
        sys.stdout.write("\n\n".join(__doc__.split("\n\n")[1:3]) + "\n")
        return
    if args == ["version_ethan"]:
        sys.stdout.write(f"ethan {version('ethan')}\n")
        return
    try:
        django.setup()
        _migrate_embedded()
        ManagementUtility(["ethan", *args]).execute()
    except ConfigError as exc:
        sys.stderr.write(f"ethan: configuration error: {exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
