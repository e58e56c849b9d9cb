"""ChatGPT and Claude exports become sessions: the branch the person saw, placeholders for what
is not text, times and model kept, search tokens as a live append writes them; idempotent;
a bad file refused with one line and nothing written."""

from __future__ import annotations

import json
import zipfile
from datetime import timedelta

import pytest
from django.conf import settings

from sessions_app.imports.export import ExportError
from sessions_app.imports.services import export_import
from sessions_app.models import ChatSession, Message
from sessions_app.search import session_message_tokens
from tests.imports.exports import START, ChatGPT, claude, text, write_json, write_zip


def said(session: ChatSession) -> list[tuple[str, str]]:
    return list(session.messages.order_by("seq").values_list("role", "content"))


def edited_chatgpt() -> ChatGPT:
    """A conversation whose first question was edited: the first version and its answer are
    left behind, the edit and what followed it are the branch the person saw."""
    chat = ChatGPT("c-edit", "Trip planning")
    system = chat.add("system", "You are ChatGPT.", hidden=True)
    chat.add("user", "Plan a trip to Rome")
    chat.add("assistant", "Rome in three days: …")
    chat.add("user", "Plan a trip to Lisbon", parent=system)
    chat.add("assistant", "Lisbon in three days: Alfama, Belém, Sintra.", model="gpt-4o-mini")
    chat.add("user", "And where should I eat?")
    chat.add("assistant", "Try a tasca in Mouraria.", model="gpt-4o-mini")
    return chat


def test_chatgpt_takes_the_branch_the_person_saw(tmp_path, owner):
    path = write_json(tmp_path / "conversations.json", [edited_chatgpt().export()])
    report = export_import(owner=owner, path=path, source="chatgpt")
    assert (report.conversations, report.sessions_created, report.messages_created) == (1, 1, 4)
    session = ChatSession.objects.get(owner=owner)
    assert said(session) == [
        ("user", "Plan a trip to Lisbon"),
        ("assistant", "Lisbon in three days: Alfama, Belém, Sintra."),
        ("user", "And where should I eat?"),
        ("assistant", "Try a tasca in Mouraria."),
    ]
    assert (session.title, session.channel) == ("Trip planning", "import")
    # The source's model is kept as history; Ethan's own model goes on with the conversation.
    assert (session.external_model, session.model) == ("gpt-4o", "")
    assert (session.last_seq, session.round_count, session.ended_at) == (4, 2, None)
    assert session.external_id == "chatgpt:c-edit"
    assert session.created_at == START
    first = session.messages.get(seq=1)
    # The times of the branch's own messages (the edit was the third message written).
    assert first.created_at == START + timedelta(seconds=120)
    assert session.updated_at == START + timedelta(seconds=210)


def test_chatgpt_non_text_parts_become_placeholders_and_hidden_messages_are_skipped(
    tmp_path, owner
):
    chat = ChatGPT("c-parts", "Parts")
    chat.add("user", {"content_type": "user_editable_context", "user_profile": "I am Ada"})
    chat.add(
        "user",
        {
            "content_type": "multimodal_text",
            "parts": [
                {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"},
                "What is in this photo?",
            ],
        },
    )
    chat.add("assistant", {"content_type": "thoughts", "thoughts": [{"content": "hmm"}]})
    code = {"content_type": "code", "language": "python", "text": "print(1+1)"}
    chat.add("assistant", code, recipient="python")
    chat.add("tool", {"content_type": "execution_output", "text": "2"})
    chat.add("assistant", "A cat. Also, 1+1 is 2.")
    chat.add("assistant", {"content_type": "code", "text": 'search("cats")'}, recipient="browser")
    chat.add("tool", text("a long page of search results"))
    drawn = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://y"}
    chat.add("tool", {"content_type": "multimodal_text", "parts": [drawn, "metadata text"]})
    chat.add("user", "Search the web for cats", hidden=True)
    chat.add(
        "tool", {"content_type": "tether_browsing_display", "result": "…", "title": "Cats - Wiki"}
    )
    chat.add("assistant", "")  # an empty message: nothing to keep
    path = write_json(tmp_path / "conversations.json", [chat.export()])
    export_import(owner=owner, path=path, source="chatgpt")
    assert said(ChatSession.objects.get(owner=owner)) == [
        ("user", "[image]\nWhat is in this photo?"),
        (
            "assistant",
            "```python\nprint(1+1)\n```\n\n[tool output]\n\nA cat. Also, 1+1 is 2.\n\n"
            "[tool use: browser]\n\n[tool output]\n\n[image]\n\n[web page: Cats - Wiki]",
        ),
    ]


def test_claude_messages_with_blocks_files_and_edits(tmp_path, owner):
    conversation = claude(
        "u-1",
        "数据库选型",
        [
            ("human", "我们用 PostgreSQL 还是 MySQL？"),
            (
                "assistant",
                [
                    {"type": "thinking", "thinking": "private"},
                    {"type": "text", "text": "PostgreSQL：JSONB 和扩展更好。"},
                    {"type": "tool_use", "name": "web_search", "input": {"q": "pg"}},
                    {"type": "tool_result", "content": [{"type": "text", "text": "…"}]},
                ],
            ),
            ("human", "好，就用它 🐘"),
        ],
    )
    conversation["chat_messages"][2]["attachments"] = [
        {"file_name": "schema.sql", "file_type": "sql", "extracted_content": "create table"}
    ]
    # An edit: a second version of the last question, answered; the last message's branch.
    branch = [dict(message) for message in conversation["chat_messages"]]
    for index, message in enumerate(branch):
        message["parent_message_uuid"] = branch[index - 1]["uuid"] if index else "root"
    retry = dict(branch[2], uuid="u-1-m2b", text="好，那就 PostgreSQL", attachments=[])
    retry["content"] = [{"type": "text", "text": "好，那就 PostgreSQL"}]
    answer = dict(branch[1], uuid="u-1-m3", parent_message_uuid="u-1-m2b")
    answer["content"] = [{"type": "text", "text": "好的。"}]
    conversation["chat_messages"] = [*branch, retry, answer]
    path = write_json(tmp_path / "conversations.json", [conversation])
    export_import(owner=owner, path=path, source="claude")
    session = ChatSession.objects.get(owner=owner)
    assert said(session) == [
        ("user", "我们用 PostgreSQL 还是 MySQL？"),
        ("assistant", "PostgreSQL：JSONB 和扩展更好。\n[tool use: web_search]\n[tool output]"),
        ("user", "好，那就 PostgreSQL"),
        ("assistant", "好的。"),
    ]
    assert (session.title, session.external_id, session.round_count) == (
        "数据库选型",
        "claude:u-1",
        2,
    )


def test_claude_plain_text_attachments_and_unicode(tmp_path, owner):
    conversation = claude("u-2", "", [("human", "x"), ("assistant", "y")])
    first = conversation["chat_messages"][0]
    first["content"] = []  # older exports: the text only
    first["text"] = "naïve café — 日本語 — emoji 🎉"
    first["files"] = [{"file_name": "notes.pdf"}]
    path = write_json(tmp_path / "conversations.json", [conversation])
    export_import(owner=owner, path=path, source="claude")
    session = ChatSession.objects.get(owner=owner)
    assert said(session)[0] == ("user", "[file: notes.pdf]\nnaïve café — 日本語 — emoji 🎉")
    # No name: the first 40 characters of the first question, as a live session's title.
    assert session.title == "[file: notes.pdf] naïve café — 日本語 — emo"


def test_search_tokens_are_those_a_live_append_writes(tmp_path, owner):
    path = write_json(tmp_path / "conversations.json", [edited_chatgpt().export()])
    export_import(owner=owner, path=path, source="chatgpt")
    rows = list(
        Message.objects.filter(session__owner=owner)
        .order_by("seq")
        .values_list("pk", "role", "content", "search_tokens")
    )
    expected = session_message_tokens([(pk, role, content) for pk, role, content, _ in rows])
    assert {pk: tokens for pk, _, _, tokens in rows} == expected
    assert "lisbon" in rows[0][3]


def test_empty_conversations_are_skipped(tmp_path, owner):
    empty_chatgpt = ChatGPT("c-empty", "Empty")
    empty_chatgpt.add("system", "", hidden=True)
    path = write_json(tmp_path / "a.json", [empty_chatgpt.export()])
    report = export_import(owner=owner, path=path, source="chatgpt")
    path = write_json(tmp_path / "b.json", [claude("u-empty", "Empty", [])])
    report2 = export_import(owner=owner, path=path, source="claude")
    assert (report.conversations, report2.conversations) == (0, 0)
    assert not ChatSession.objects.filter(owner=owner).exists()


def test_a_very_long_message_is_kept_whole(tmp_path, owner):
    long = "Lisbon " * (settings.ETHAN_MESSAGE_MAX_CHARS // 3)
    chat = ChatGPT("c-long", "Long").exchange((long, "ok"))
    path = write_json(tmp_path / "conversations.json", [chat.export()])
    export_import(owner=owner, path=path, source="chatgpt")
    stored = Message.objects.get(session__owner=owner, seq=1).content
    assert len(stored) > settings.ETHAN_MESSAGE_MAX_CHARS
    assert stored == long


def test_a_zip_with_other_files_in_a_folder(tmp_path, owner):
    chats = [ChatGPT(f"c-{n}", f"Chat {n}").exchange((f"q{n}", f"a{n}")).export() for n in "123"]
    path = write_zip(tmp_path / "export.zip", chats, folder="export-2024/")
    report = export_import(owner=owner, path=path, source="chatgpt")
    assert (report.conversations, report.messages_created) == (3, 6)


def test_importing_twice_adds_nothing_and_a_newer_export_adds_only_what_is_new(tmp_path, owner):
    first = ChatGPT("c-1", "First").exchange(("I live in Lisbon", "Noted."))
    second = ChatGPT("c-2", "Second").exchange(("hello", "hi"))
    path = write_json(tmp_path / "conversations.json", [first.export(), second.export()])
    export_import(owner=owner, path=path, source="chatgpt")
    again = export_import(owner=owner, path=path, source="chatgpt")
    assert (again.sessions_created, again.messages_created, again.unchanged) == (0, 0, 2)
    assert Message.objects.filter(session__owner=owner).count() == 4

    first.exchange(("I moved to Porto", "Congratulations!"))
    third = ChatGPT("c-3", "Third").exchange(("bye", "bye"))
    newer = write_json(tmp_path / "newer.json", [first.export(), second.export(), third.export()])
    report = export_import(owner=owner, path=newer, source="chatgpt")
    assert (report.sessions_created, report.messages_created, report.unchanged) == (1, 4, 1)
    session = ChatSession.objects.get(owner=owner, external_id="chatgpt:c-1")
    assert [content for _, content in said(session)][2:] == ["I moved to Porto", "Congratulations!"]
    assert (session.last_seq, session.round_count) == (4, 2)
    # The stored answer gained the new question's words, as a live append gives them.
    rows = list(session.messages.order_by("seq").values_list("pk", "role", "content"))
    tokens = dict(session.messages.values_list("pk", "search_tokens"))
    assert tokens == session_message_tokens(rows)


def test_a_conversation_edited_since_its_import_is_kept_as_it_was(tmp_path, owner):
    chat = ChatGPT("c-1", "First")
    question = chat.add("user", "I live in Lisbon")
    chat.add("assistant", "Noted.")
    path = write_json(tmp_path / "conversations.json", [chat.export()])
    export_import(owner=owner, path=path, source="chatgpt")
    chat.add("user", "I live in Porto", parent=chat.mapping[question]["parent"])
    chat.add("assistant", "Noted, Porto.")
    path = write_json(tmp_path / "conversations.json", [chat.export()])
    report = export_import(owner=owner, path=path, source="chatgpt")
    assert (report.changed, report.messages_created) == (["First"], 0)
    assert said(ChatSession.objects.get(owner=owner))[0] == ("user", "I live in Lisbon")


def test_another_owners_import_of_the_same_export_is_their_own(tmp_path, owner, other_owner):
    path = write_json(tmp_path / "conversations.json", [edited_chatgpt().export()])
    export_import(owner=owner, path=path, source="chatgpt")
    report = export_import(owner=other_owner, path=path, source="chatgpt")
    assert report.sessions_created == 1
    assert ChatSession.objects.filter(external_id="chatgpt:c-edit").count() == 2


def broken_zip(path):
    write_zip(path, [ChatGPT("c-1", "x").exchange(("a", "b")).export()])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def zip_without_conversations(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("user.json", "{}")
    return path


def truncated_json(path):
    good = [ChatGPT(f"c-{n}", "x").exchange(("a", "b")).export() for n in range(3)]
    text_ = json.dumps(good)
    path.write_text(text_[: len(text_) - 40])
    return path


def wrong_shape(path):
    path.write_text(json.dumps({"conversations": []}))
    return path


def claude_given_as_chatgpt(path):
    return write_json(path, [claude("u-1", "x", [("human", "hi")])])


def only_items_not_objects(path):
    path.write_text(json.dumps([42, "x"]))
    return path


@pytest.mark.parametrize(
    "make, name, problem",
    [
        (broken_zip, "export.zip", "export.zip: not a readable zip"),
        (zip_without_conversations, "export.zip", "export.zip: the zip holds no conversations"),
        (truncated_json, "conversations.json", "conversations.json: broken JSON in conversation 3"),
        (wrong_shape, "conversations.json", "conversations.json: not a chatgpt export"),
        (
            claude_given_as_chatgpt,
            "conversations.json",
            "conversations.json: not a chatgpt export: conversation 1 has no mapping of "
            "messages; it looks like a claude export: --from claude",
        ),
        (
            only_items_not_objects,
            "c.json",
            "c.json: no conversation could be read: conversation 1 is not an object (and 1 more",
        ),
    ],
)
def test_a_bad_file_is_refused_in_one_line_and_nothing_is_written(
    tmp_path, owner, make, name, problem
):
    path = make(tmp_path / name)
    with pytest.raises(ExportError) as refused:
        export_import(owner=owner, path=path, source="chatgpt")
    assert str(refused.value).startswith(problem), str(refused.value)
    assert "\n" not in str(refused.value)
    assert not ChatSession.objects.exists()


def test_unstorable_characters_become_replacement_characters(tmp_path, owner):
    chat = ChatGPT("c-1", "Nul\u0000title").exchange(("a\u0000b \ud800", "ok"))
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([chat.export()]))  # ASCII escapes, as JSON allows them
    export_import(owner=owner, path=path, source="chatgpt")
    session = ChatSession.objects.get(owner=owner)
    assert session.title == "Nul\ufffdtitle"
    # ijson's C parser already reads a lone surrogate as "?": stored either way, not refused.
    assert said(session)[0][1] in ("a\ufffdb \ufffd", "a\ufffdb ?")


def test_text_parts_are_joined(tmp_path, owner):
    chat = ChatGPT("c-1", "parts")
    chat.add("user", text("first part", "second part"))
    chat.add("assistant", "ok")
    path = write_json(tmp_path / "conversations.json", [chat.export()])
    export_import(owner=owner, path=path, source="chatgpt")
    assert said(ChatSession.objects.get(owner=owner))[0] == ("user", "first part\nsecond part")
