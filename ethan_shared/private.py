"""Owner-only files: $ETHAN_HOME holds one person's conversations and memory, so the folder is
0700 and every file Ethan writes in it 0600, as is every file an export writes wherever it goes.

Plain Python (no Django): the settings module uses it before Django is set up.

Not a process umask of 0o077: it would also apply to what a process writes outside the home
(collectstatic's files for a web server to read, a migration written by makemigrations, a socket
gunicorn binds), which would surprise. Each file Ethan writes in the home is created owner-only
instead: SQLite gives its -wal, -shm and -journal files the database file's own mode, so a
database file made 0600 before SQLite first opens it keeps its companions private; Django's file
cache already makes its folder 0700 and its files 0600 (mkstemp); the rest go through here.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600

# What Ethan writes in the home, and what the original CLI wrote there (the layout Ethan imports
# and exports, docs/files.md); the two folders are tightened with everything in them. Nothing
# else is touched: ETHAN_HOME may name any folder, and another program's files are not Ethan's.
HOME_FILES = ("secret_key", "config.yaml", "history", "ethan.sqlite3", "sessions.db")
HOME_FOLDERS = ("cache", "memory")
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def private_dir(path: Path) -> Path:
    """Make the folder `path` if missing: the folders this creates are 0700 (existing ones are
    left as they are)."""
    missing = []
    folder = path
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        # mkdir's mode goes through the umask, which only ever takes bits away from 0700.
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
    return path


def private_file(path: Path) -> Path:
    """Create `path` empty and 0600 if it is missing, in a private folder (an existing file is
    left as it is: home_tighten sees to the home's at start)."""
    private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    return path


def private_write_text(path: Path, text: str) -> None:
    """Write a whole file as UTF-8, 0600, replacing it (a file already there is made 0600 too)."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), FILE_MODE)
        handle.write(text)


def _tighten(path: Path, folder: bool) -> bool:
    """Take group and other access away from one entry of ours; whether it had any."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    # A symlink points elsewhere, and another account's file is not ours to change.
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid():
        return False
    if stat.S_ISDIR(info.st_mode) != folder or not info.st_mode & 0o077:
        return False
    os.chmod(path, DIR_MODE if folder else stat.S_IMODE(info.st_mode) & 0o700)
    return True


def home_tighten(home: Path, *, database: Path | None = None) -> str | None:
    """Make an existing home private: the folder 0700, Ethan's files in it 0600 (and `database`,
    the SQLite file of DATABASE_URL, when it lies in the home). Returns the line that says what
    changed, or None when nothing did (so it is said once, on the start that changed it)."""
    if not home.is_dir() or home.is_symlink():
        return None
    home_changed = _tighten(home, folder=True)
    names = [*HOME_FILES]
    if database is not None and database.parent == home and database.name not in names:
        names.append(database.name)
    files = [home / name for name in names]
    files += [home / f"{name}{suffix}" for name in names for suffix in SQLITE_COMPANIONS]
    folders = 0
    for name in HOME_FOLDERS:
        top = home / name
        if top.is_symlink() or not top.is_dir():
            continue
        # os.walk does not enter a symlinked folder (and _tighten leaves symlinks alone).
        for root, _dirnames, filenames in os.walk(top):
            folders += _tighten(Path(root), folder=True)
            files += [Path(root) / filename for filename in filenames]
    changed = sum(_tighten(path, folder=False) for path in files)
    if not (home_changed or folders or changed):
        return None
    shown = _display(home)
    where = "in it" if home_changed else f"in {shown}"
    private = [shown] if home_changed else []
    if folders:
        private.append(f"{_count(folders, 'folder')} {where}")
    clauses = [" and ".join(private) + " private (0700)"] if private else []
    if changed:
        clauses.append(f"{_count(changed, 'file')} {where} owner-only (0600)")
    return "Ethan: made " + " and ".join(clauses)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _display(home: Path) -> str:
    """~/.ethan rather than /home/ada/.ethan."""
    try:
        return f"~/{home.relative_to(Path.home())}"
    except (ValueError, RuntimeError):  # elsewhere, or no home folder known
        return str(home)
