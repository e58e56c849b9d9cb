"""agent_app's part of the ~/.ethan layout (docs/files.md): config.yaml, kept as a person's own
settings (OwnerSettings; `model` becomes their default chat model) and written back on export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth.models import AbstractBaseUser

from agent_app.models import OwnerSettings
from ethan_shared.config import ConfigError, read_config_file
from ethan_shared.layout import Imported, LayoutError, storable
from ethan_shared.private import private_write_text

CONFIG = "config.yaml"


def config_read(path: Path, notes: list[str]) -> dict[str, Any]:
    """config.yaml, with the same checks as at start-up (file and line on errors)."""
    try:
        read_config_file(path)
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except ConfigError as exc:
        raise LayoutError(str(exc).replace(str(path), CONFIG)) from None
    # Kept as JSON (OwnerSettings.values), which PostgreSQL's jsonb refuses NUL in.
    return storable(CONFIG, "a value", values)


def config_import(*, owner: AbstractBaseUser, values: dict[str, Any]) -> Imported:
    OwnerSettings.objects.update_or_create(owner=owner, defaults={"values": values})
    return {"config": (1, 0)}


def config_export(*, owner: AbstractBaseUser, home: Path) -> None:
    """Write `owner`'s imported config.yaml back, if they have one."""
    values = OwnerSettings.objects.filter(owner=owner).values_list("values", flat=True).first()
    if values is not None:
        private_write_text(
            home / CONFIG, yaml.safe_dump(values, allow_unicode=True, sort_keys=False)
        )
