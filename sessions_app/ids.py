"""Session ids: s_YYYYMMDD_HHMM_xxxx, local time plus four random lowercase letters or digits."""

from __future__ import annotations

import re
import secrets
import string
from datetime import datetime

from django.utils import timezone

SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
SUFFIX_LENGTH = 4
SESSION_ID_RE = re.compile(r"^s_\d{8}_\d{4}_[a-z0-9]{4}$")


def random_suffix() -> str:
    return "".join(secrets.choice(SUFFIX_ALPHABET) for _ in range(SUFFIX_LENGTH))


def new_session_id(now: datetime | None = None) -> str:
    """A fresh id in the configured TIME_ZONE. Unique only with luck: the insert checks."""
    local = timezone.localtime(now or timezone.now())
    return f"s_{local:%Y%m%d_%H%M}_{random_suffix()}"
