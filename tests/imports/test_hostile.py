"""Hostile and broken exports (issue 41): a file nested deeper than any export, holding a value
longer than any message, inflating like a zip bomb or read for too long is refused in one line
that names it, with nothing written; a conversation that cannot be read is skipped with its
line and the others are imported. Every file here is generated."""

from __future__ import annotations

import json
import zipfile
from types import SimpleNamespace

import pytest

from sessions_app.imports import export
from sessions_app.imports.export import MAX_DEPTH, ExportError
from sessions_app.imports.services import export_check, export_import
from sessions_app.models import ChatSession
from tests.imports.exports import ChatGPT, claude, write_json


def lisbon() -> dict:
    return claude("u-1", "Home", [("human", "I live in Lisbon"), ("assistant", "Lovely")])


def nested(path, depth: int):
    """A valid conversation carrying `"junk": [[[…]]]`, the whole file `depth` levels deep
    (the list of conversations and the conversation are two of them)."""
    text = json.dumps([lisbon()])
    junk = "[" * (depth - 2) + "]" * (depth - 2)
    path.write_text(text[:-2] + f', "junk": {junk}}}]')
    return path


def refusal(path, source: str = "claude") -> str:
    with pytest.raises(ExportError) as refused:
        export_import(owner=None, path=path, source=source)
    assert "\n" not in str(refused.value)
    return str(refused.value)


@pytest.mark.django_db
def test_nesting_deeper_than_any_export_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    # 80 KB: on the landed code its reading took a process to 3.9 GB.
    deep = nested(tmp_path / "deep.json", 40_000)
    assert refusal(deep) == (
        f"deep.json: refused: nested deeper than {MAX_DEPTH} levels (no real export has one)"
    )
    assert not ChatSession.objects.exists()


@pytest.mark.django_db
def test_nesting_up_to_the_limit_is_read(tmp_path, owner):
    report = export_import(
        owner=owner, path=nested(tmp_path / "c.json", MAX_DEPTH), source="claude"
    )
    assert report.sessions_created == 1
    assert refusal(nested(tmp_path / "c.json", MAX_DEPTH + 1)).startswith("c.json: refused")


@pytest.mark.django_db
@pytest.mark.parametrize("escaped", [False, True], ids=["plain", "escaped-quotes"])
def test_a_value_longer_than_any_message_is_refused(tmp_path, monkeypatch, escaped):
    monkeypatch.setattr(export, "MAX_VALUE_BYTES", 2_000_000)
    conversation = lisbon()
    # Plain: refused as its bytes arrive, before a parser holds it; broken by escaped quotes
    # every few characters: refused by its parsed length.
    conversation["chat_messages"][0]["text"] = ('abc"' if escaped else "abcd") * 600_000
    long = write_json(tmp_path / "long.json", [conversation])
    assert refusal(long) == "long.json: refused: a value over 2 MB (no real export has one)"
    assert not ChatSession.objects.exists()


def bomb(path, megabytes: int = 40):
    """A zip holding one conversation whose message is `megabytes` MB of one letter."""
    conversation = lisbon()
    conversation["chat_messages"][0]["text"] = "a" * (megabytes * 1_048_576)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", json.dumps([conversation]))
    return path


@pytest.mark.django_db
def test_a_zip_bomb_is_refused_from_its_directory_before_it_is_inflated(tmp_path, monkeypatch):
    zipped = bomb(tmp_path / "export.zip")

    def never(*args, **kwargs):
        raise AssertionError("the member was opened")

    monkeypatch.setattr(zipfile.ZipFile, "open", never)
    refused = refusal(zipped)
    assert refused.startswith("export.zip: refused: conversations.json inflates ")
    assert refused.endswith("over 100 (ETHAN_IMPORT_MAX_RATIO) is taken for a zip bomb")
    assert not ChatSession.objects.exists()


@pytest.mark.django_db
def test_past_the_expanded_size_a_zip_or_a_file_is_refused(tmp_path, settings):
    settings.ETHAN_IMPORT_MAX_RATIO = 1_000_000  # the size alone
    settings.ETHAN_IMPORT_MAX_EXPANDED_BYTES = 10 * 1_048_576
    assert refusal(bomb(tmp_path / "export.zip")) == (
        "export.zip: refused: conversations.json is over 10 MB (40 MB; "
        "ETHAN_IMPORT_MAX_EXPANDED_BYTES)"
    )
    settings.ETHAN_IMPORT_MAX_EXPANDED_BYTES = 1000
    plain = write_json(tmp_path / "conversations.json", [lisbon()] * 5)
    assert refusal(plain).startswith(
        "conversations.json: refused: conversations.json is over 1,000 bytes"
    )
    assert not ChatSession.objects.exists()


@pytest.mark.django_db
def test_reading_longer_than_the_limit_is_refused(tmp_path, settings, monkeypatch):
    settings.ETHAN_IMPORT_MAX_SECONDS = 60
    # A clock that moves a minute and a half at each look: the reading starts at 0, and its
    # first chunk comes at 90 s, past the limit.
    clock = iter(range(0, 10_000, 90))
    monkeypatch.setattr(export, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    path = write_json(tmp_path / "slow.json", [lisbon()])
    assert (
        refusal(path) == "slow.json: refused: still reading after 60 s (ETHAN_IMPORT_MAX_SECONDS)"
    )
    assert not ChatSession.objects.exists()


@pytest.mark.django_db
def test_an_integer_too_large_is_broken_json_not_a_crash(tmp_path):
    # 5,000 digits: ijson's default reading of it crashed the process (yajl2_c 3.6.0).
    path = tmp_path / "c.json"
    path.write_text(json.dumps([lisbon()])[:-2] + ', "n": ' + "1" * 5000 + "}]")
    assert refusal(path) == (
        "c.json: broken JSON in conversation 1 (parse error: integer overflow)"
    )


def no_mapping(conversation_id: str) -> dict:
    """A ChatGPT conversation without its mapping, as a public parser's test fixture has."""
    return {"id": conversation_id, "title": "Lost", "create_time": 1.7e9}


@pytest.mark.django_db
def test_broken_conversations_are_skipped_each_with_its_line_and_the_rest_imported(tmp_path, owner):
    good = [ChatGPT(f"c-{n}", f"Chat {n}").exchange(("hi", "hello")).export() for n in range(3)]
    odd_author = ChatGPT("c-odd", "Odd").exchange(("hi", "hello")).export()
    for node in odd_author["mapping"].values():
        if node["message"]:
            node["message"]["metadata"] = "not an object"
    items = [good[0], no_mapping("c-lost"), 42, good[1], odd_author, good[2]]
    path = write_json(tmp_path / "conversations.json", items)
    report = export_import(owner=owner, path=path, source="chatgpt")
    assert (report.conversations, report.sessions_created) == (3, 3)
    assert report.skipped[:2] == [
        "conversations.json: skipped conversation 2 ('Lost'): it has no mapping of messages",
        "conversations.json: skipped conversation 3: it is not an object",
    ]
    assert report.skipped[2].startswith(
        "conversations.json: skipped conversation 5 ('Odd'): it has a field of an unexpected "
        "type (AttributeError: "
    )
    assert all("\n" not in line for line in report.skipped)
    assert ChatSession.objects.filter(owner=owner).count() == 3
    assert export_check(path, source="chatgpt").skipped == report.skipped


@pytest.mark.django_db
def test_an_export_none_of_whose_conversations_can_be_read_is_refused(tmp_path):
    path = write_json(tmp_path / "c.json", [no_mapping("a"), no_mapping("b"), 7])
    assert refusal(path, "chatgpt") == (
        "c.json: no conversation could be read: conversation 1 ('Lost') has no mapping of "
        "messages (and 2 more like it)"
    )
    assert not ChatSession.objects.exists()


@pytest.mark.django_db
def test_claude_says_which_field_is_missing(tmp_path, owner):
    items = [lisbon(), {"uuid": "u-2", "name": "Empty"}, {"chat_messages": []}]
    items.append({"uuid": "u-3", "chat_messages": "hi"})
    report = export_import(
        owner=owner, path=write_json(tmp_path / "c.json", items), source="claude"
    )
    assert report.sessions_created == 1
    assert report.skipped == [
        "c.json: skipped conversation 2 ('Empty'): it has no chat_messages",
        "c.json: skipped conversation 3: it has no uuid",
        "c.json: skipped conversation 4: it has chat_messages that are not a list",
    ]


@pytest.mark.django_db
def test_a_file_with_a_byte_order_mark_is_read(tmp_path, owner):
    path = tmp_path / "c.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([lisbon()]).encode())
    assert export_import(owner=owner, path=path, source="claude").sessions_created == 1


@pytest.mark.django_db
def test_a_small_file_may_compress_as_well_as_it_likes(tmp_path, owner):
    conversation = lisbon()
    conversation["chat_messages"][0]["text"] = "a" * 1_000_000
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", json.dumps([conversation]))
    assert zipfile.ZipFile(path).getinfo("conversations.json").compress_size < 10_000
    assert export_import(owner=owner, path=path, source="claude").sessions_created == 1
