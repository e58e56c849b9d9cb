"""Where Ethan's settings come from: the environment, then $ETHAN_HOME/config.yaml, then defaults.

This module is plain Python (no Django imports) so that settings.py, the `ethan` console script
and the tests can all read configuration the same way before Django is set up.

config.yaml keys are the environment variable names, in any case, optionally without the
``ETHAN_`` prefix; nested mappings are joined with ``_``. So all of these set ETHAN_MODEL::

    model: claude-sonnet-4-6
    ETHAN_MODEL: claude-sonnet-4-6

and ``memory: {hot_size: 10}`` sets ETHAN_MEMORY_HOT_SIZE. Keys Ethan does not know are kept
(the original CLI's config.yaml has some) and simply never read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """A setting that cannot be used. The message names where it came from (file and line)."""


def ethan_home(environ: Mapping[str, str] | None = None) -> Path:
    """$ETHAN_HOME, default ~/.ethan. Only the environment can set it: config.yaml lives there."""
    environ = os.environ if environ is None else environ
    raw = environ.get("ETHAN_HOME") or "~/.ethan"
    return Path(raw).expanduser().resolve()


def _flatten(mapping: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{str(key).upper()}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, prefix=f"{name}_"))
        else:
            flat[name] = value
    return flat


def _key_lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    """1-based line of each flattened key, so a bad value can be pointed at."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            name = f"{prefix}{str(key_node.value).upper()}"
            if isinstance(value_node, yaml.MappingNode):
                lines.update(_key_lines(value_node, prefix=f"{name}_"))
            else:
                lines[name] = key_node.start_mark.line + 1
    return lines


def read_config_file(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse config.yaml into flat {UPPER_NAME: value} and {UPPER_NAME: line}; missing is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{path}{line}: invalid YAML: {problem}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}, {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path}, line 1: expected a mapping of settings (key: value), "
            f"got {type(data).__name__}"
        )
    return _flatten(data), _key_lines(yaml.compose(text, Loader=yaml.SafeLoader))


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true/false (1/0, yes/no, on/off), got {value!r}")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(str(value).strip())


def _to_list(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(item).strip() for item in value if str(item).strip()]
    return [item.strip() for item in str(value).split(",") if item.strip()]


CASTS: dict[type, Callable[[Any], Any]] = {
    bool: _to_bool,
    int: _to_int,
    float: float,
    str: str,
    list: _to_list,
}


@dataclass(frozen=True)
class Config:
    """One lookup with the documented precedence: environment, config.yaml, default."""

    home: Path
    environ: Mapping[str, str]
    file_values: Mapping[str, Any] = field(default_factory=dict)
    file_lines: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Config:
        environ = dict(os.environ if environ is None else environ)
        home = ethan_home(environ)
        values, lines = read_config_file(config_path(home))
        return cls(home=home, environ=environ, file_values=values, file_lines=lines)

    @property
    def path(self) -> Path:
        return config_path(self.home)

    def source_of(self, name: str) -> str:
        """Where a value comes from, for error messages and `ethan config`-style reports."""
        if name in self.environ:
            return f"environment variable {name}"
        key = self._file_key(name)
        if key is not None:
            return f"{self.path}, line {self.file_lines.get(key, 1)} ({key.lower()})"
        return "default"

    def _file_key(self, name: str) -> str | None:
        candidates = [name]
        if name.startswith("ETHAN_"):
            candidates.append(name.removeprefix("ETHAN_"))
        for key in candidates:
            if key in self.file_values:
                return key
        return None

    def get(self, name: str, default: T, cast: type = str) -> T:
        if name in self.environ:
            raw: Any = self.environ[name]
        else:
            key = self._file_key(name)
            if key is None:
                return default
            raw = self.file_values[key]
            if raw is None:
                return default
        try:
            return CASTS[cast](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name} from {self.source_of(name)}: {exc}") from exc

    def positive(self, name: str, default: int) -> int:
        """An integer setting that must be at least 1 (sizes, capacities, limits, timeouts)."""
        value = self.get(name, default, int)
        if value < 1:
            raise ConfigError(
                f"{name} from {self.source_of(name)}: must be at least 1, not {value}"
            )
        return value

    def non_negative(self, name: str, default: int) -> int:
        """An integer setting that may be 0 (a duration where 0 means "not kept")."""
        value = self.get(name, default, int)
        if value < 0:
            raise ConfigError(f"{name} from {self.source_of(name)}: must be 0 or more, not {value}")
        return value

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.get(name, default, str)
        if value not in choices:
            raise ConfigError(
                f"{name} from {self.source_of(name)}: use {' or '.join(choices)}, not {value!r}"
            )
        return value

    def rate(self, name: str, default: str) -> str:
        """A request rate as DRF's throttles read it ("600/min": a count, then s, m, h or d),
        checked here so that a typo stops every entry point instead of failing each request."""
        value = self.get(name, default, str).strip()
        count, _, period = value.partition("/")
        if not (count.isdigit() and int(count) > 0 and period[:1] in ("s", "m", "h", "d")):
            raise ConfigError(
                f"{name} from {self.source_of(name)}: expected a rate such as 600/min "
                f"(a count, then /s, /min, /hour or /day), got {value!r}"
            )
        return value

    def has(self, name: str) -> bool:
        return name in self.environ or self._file_key(name) is not None


def config_path(home: Path) -> Path:
    return home / "config.yaml"


def secret_key_file(home: Path) -> str:
    """The embedded install's own SECRET_KEY: made once in $ETHAN_HOME/secret_key (readable by
    its owner only), so a laptop needs no setting and no two installs share a key. A deployment
    with several hosts sets DJANGO_SECRET_KEY instead (they must agree)."""
    import secrets
    import time

    from ethan_shared.private import FILE_MODE, private_dir

    path = home / "secret_key"
    for _ in range(50):
        try:
            key = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the secret key: {exc}") from exc
        else:
            if key:
                return key
            time.sleep(0.02)  # another process has just created it and is writing
            continue
        try:
            private_dir(home)
            # O_EXCL: of two processes starting at once, the second reads the first one's key.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(
                f"{path}: cannot write a secret key ({exc}); set DJANGO_SECRET_KEY instead"
            ) from exc
        key = secrets.token_urlsafe(50)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(key + "\n")
        return key
    raise ConfigError(f"{path} is empty: delete it or set DJANGO_SECRET_KEY")


def settings_or_exit(program: str = "ethan") -> None:
    """Load Django's settings now, in an entry point (gunicorn, the Celery worker, WSGI/ASGI),
    so that a bad value stops the process with one line naming the variable rather than a
    traceback, or an error on every request later."""
    import sys

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 (importing the module validates every value)
    except ConfigError as exc:
        sys.stderr.write(f"{program}: configuration error: {exc}\n")
        sys.exit(1)
