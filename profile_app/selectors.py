"""Reads of layer 3, and the rendering of user_profile.md."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection

from profile_app.markdown import render
from profile_app.models import ProfileSection
from profile_app.sections import SECTIONS


def profile_sections(*, owner: AbstractBaseUser) -> dict[str, str]:
    """{key: content} for all seven sections (empty where nothing is written): one query."""
    # Every turn reads them: SQL, as its other reads (memory_app.selectors.procedures_active).
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {connection.ops.quote_name('key')}, content"
            f" FROM {ProfileSection._meta.db_table} WHERE owner_id = %s",
            [owner.pk],
        )
        stored = dict(cursor.fetchall())
    return {section.key: stored.get(section.key, "") for section in SECTIONS}


def profile_markdown(*, owner: AbstractBaseUser) -> str:
    return render(profile_sections(owner=owner))


def profile_is_empty(contents: dict[str, str]) -> bool:
    return not any(text.strip() for text in contents.values())
