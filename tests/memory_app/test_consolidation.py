"""Working memory end to end: the context's shape as a conversation grows, how many compression
calls it costs and on which model, extraction in both modes, and the cursor claims."""

from __future__ import annotations

import json

import pytest

import ethan_llm
from channels_app.turns import turn_run
from ethan_shared import queue
from memory_app import consolidator
from memory_app.consolidator import consolidation_run
from memory_app.models import Fact, FactEvent, Summary, WorkingState
from memory_app.working import MemoryConfig
from profile_app.models import ProfileSection
from sessions_app import services as session_services
from tests.fakes.base import Reply
from tests.fakes.openai_fake import FakeOpenAI, MiniModel

pytestmark = pytest.mark.django_db


def round_text(n: int) -> str:
    return {1: "我是后端工程师，住在杭州。", 3: "我更喜欢简短的回答。"}.get(
        n, f"我们聊第{n}个话题。"
    )


def test_context_shape_and_compression_calls_over_31_rounds(
    owner, fakes, settings, django_capture_on_commit_callbacks
):
    settings.ETHAN_EMBEDDED = True
    openai = fakes["openai"]
    mini = MiniModel()
    openai.fake.responder = mini
    for n in range(15):  # trusted facts that fill <memory_context>
        Fact.objects.create(
            owner=owner, content=f"seed {n}", content_key=f"s{n}", confidence=0.99, source="admin"
        )
    session = None
    for n in range(1, 32):
        with django_capture_on_commit_callbacks(execute=True):
            result = turn_run(owner=owner, session=session, text=round_text(n), model="gpt-4o")
        session = result.session
        queue.run_deferred()  # embedded: consolidation after the reply

    chats = [r.body for r in openai.fake.requests if r.body["model"] == "gpt-4o"]
    assert len(chats) == 31

    def shape(n):
        return [(m["role"], m["content"]) for m in chats[n - 1]["messages"][1:]]

    def verbatim(first, last):
        out = []
        for k in range(first, last + 1):
            out += [("user", round_text(k)), ("assistant", None)]
        return out

    def same(n, expected):
        got = shape(n)
        assert len(got) == len(expected), n
        for (role, content), (want_role, want) in zip(got, expected, strict=True):
            assert role == want_role, n
            if want is not None:
                assert content == want, n

    same(1, [("user", round_text(1))])
    same(10, [*verbatim(1, 9), ("user", round_text(10))])
    same(11, [*verbatim(1, 10), ("user", round_text(11))])
    same(15, [*verbatim(1, 14), ("user", round_text(15))])  # 4 rounds wait for their batch
    # Each batch's one call promoted its facts: from turn 16 on, the long-term block shows
    # those of this conversation not already in <memory_context>.
    for n in (16, 30, 31):
        long_term = shape(n)[0][1]
        assert long_term.startswith("[长期记忆]\n- 用户说过："), n
        assert "- 用户说过：我是后端工程师，住在杭州。" in long_term, n
    same(
        16,
        [
            ("user", None),
            ("assistant", "好的。"),
            ("user", "[对话摘要]\n摘要1"),
            ("assistant", "好的。"),
            *verbatim(6, 15),
            ("user", round_text(16)),
        ],
    )
    same(
        30,
        [
            ("user", None),
            ("assistant", "好的。"),
            ("user", "[对话摘要]\n摘要1\n摘要2\n摘要3"),
            ("assistant", "好的。"),
            *verbatim(16, 29),
            ("user", round_text(30)),
        ],
    )
    same(
        31,
        [
            ("user", None),
            ("assistant", "好的。"),
            ("user", "[对话摘要]\n滚动摘要"),
            ("assistant", "好的。"),
            *verbatim(21, 30),
            ("user", round_text(31)),
        ],
    )

    # Compression ran on the routed model: four batches, each one call giving its summary and
    # its facts, and one fold of the full warm zone.
    assert mini.calls == ["consolidate"] * 4 + ["fold"]
    assert {r.body["model"] for r in openai.fake.requests} == {"gpt-4o", "gpt-4o-mini"}
    assert list(
        Summary.objects.order_by("first_round").values_list(
            "first_round", "last_round", "model", "folded"
        )
    ) == [
        (1, 5, "gpt-4o-mini", True),
        (6, 10, "gpt-4o-mini", True),
        (11, 15, "gpt-4o-mini", True),
        (16, 20, "gpt-4o-mini", True),
    ]
    state = WorkingState.objects.get(session=session)
    assert (
        state.compressed_through,
        state.extracted_through,
        state.folded_through,
        state.rolling_summary,
    ) == (20, 20, 20, "滚动摘要")
    # Every round that left the hot zone was extracted, once, its fact tied to its message.
    promoted = Fact.objects.filter(session=session, source="consolidator").order_by("id")
    assert [(fact.content, fact.confidence) for fact in promoted] == [
        (f"用户说过：{round_text(n)}", 0.8) for n in range(1, 21)
    ]
    assert [list(fact.sources.values_list("content", flat=True)) for fact in promoted] == [
        [round_text(n)] for n in range(1, 21)
    ]


def _rounds(owner, texts, mode="work", model="offline"):
    session = session_services.session_start(owner=owner, mode=mode, model=model)
    return _rounds_into(session, texts)


def _rounds_into(session, texts):
    for text in texts:
        session_services.message_append(session=session, role="user", content=text)
        session_services.message_append(session=session, role="assistant", content="嗯。")
    return session


SMALL = MemoryConfig(hot_size=1, compress_batch=1, warm_capacity=2)
COMPANION_TEXTS = [
    "我叫张三，我是后端工程师。最近压力很大，晚上失眠。",
    "听音乐能让我放松。",
    "我更喜欢简短的回答。",
]


def test_companion_mode_extracts_psych_but_never_basic_traits(owner, llm_config):
    session = _rounds(owner, COMPANION_TEXTS, mode="companion")
    report = consolidation_run(session_id=session.pk, config=SMALL)
    # Each batch's call extracts its facts and feelings; the full warm zone folds once.
    assert (report.summaries, report.extractions, report.folds) == (2, 2, 1)
    psych = ProfileSection.objects.get(owner=owner, key="psych").content
    assert psych == "- 最近压力很大，晚上失眠\n- 听音乐能让用户放松"
    assert not ProfileSection.objects.filter(owner=owner, key="basic").exists()
    assert list(Fact.objects.order_by("id").values_list("content", "category", "confidence")) == [
        ("用户叫张三，用户是后端工程师", "knowledge", 0.8)
    ]


def test_work_mode_extracts_no_psych_profile(owner, llm_config):
    session = _rounds(owner, COMPANION_TEXTS, mode="work")
    consolidation_run(session_id=session.pk, config=SMALL)
    assert not ProfileSection.objects.exists()
    assert Fact.objects.count() == 1


def test_offline_rules_reinforce_update_supersede_and_history(owner, llm_config):
    old_city = Fact.objects.create(
        owner=owner, content="用户住在杭州", content_key="x", confidence=0.8, source="consolidator"
    )
    from memory_app.normalize import content_key

    Fact.objects.filter(pk=old_city.pk).update(content_key=content_key("用户住在杭州"))
    session = _rounds(owner, ["我住在杭州。", "纠正一下，我住在上海，不是杭州。", "你好"])
    report = consolidation_run(session_id=session.pk, config=SMALL)
    assert report.facts == ["reinforce", "supersede"]
    old_city.refresh_from_db()
    new_city = Fact.objects.get(content="纠正一下，用户住在上海，不是杭州")
    assert (old_city.status, old_city.superseded_by_id, old_city.hit_count) == (
        "superseded",
        new_city.pk,
        2,
    )
    assert (new_city.status, new_city.category, new_city.confidence) == (
        "active",
        "correction",
        0.9,
    )
    assert list(old_city.events.order_by("id").values_list("event", "actor")) == [
        ("reinforce", "consolidator"),
        ("supersede", "consolidator"),
    ]
    assert list(new_city.events.values_list("event", flat=True)) == ["add"]


def test_a_language_model_decides_with_numbered_known_facts(owner, fakes):
    openai = fakes["openai"]
    city = Fact.objects.create(
        owner=owner, content="用户住在杭州", content_key="k1", confidence=0.8, source="consolidator"
    )
    coffee = Fact.objects.create(
        owner=owner, content="用户喜欢咖啡", content_key="k2", confidence=0.8, source="consolidator"
    )
    session = _rounds(
        owner, ["我搬到上海了，不住杭州了。", "我还是喜欢咖啡，尤其美式。", "好"], model="gpt-4o"
    )
    openai.fake.reply(
        openai.text(
            json.dumps(
                {
                    "summary": "摘要1",
                    "facts": [
                        {
                            "content": "用户住在上海",
                            "category": "correction",
                            "importance": 0.9,
                            "action": "SUPERSEDE",
                            "target": 2,
                        },
                        {
                            "content": "用户喜欢美式咖啡",
                            "category": "preference",
                            "importance": 0.8,
                            "action": "UPDATE",
                            "target": 1,
                        },
                        {
                            "content": "用户养了一只猫",
                            "category": "knowledge",
                            "importance": 0.8,
                            "action": "UPDATE",
                            "target": 99,
                        },
                    ],
                },
                ensure_ascii=False,
            )
        )
    )
    openai.fake.reply(openai.text("滚动摘要"))
    # Rounds 1-2 in one batch: one call gives their summary and their facts.
    config = MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=2)
    report = consolidation_run(session_id=session.pk, config=config)
    assert report.facts == ["supersede", "update", "add"]
    extract_system = openai.fake.requests[0].body["messages"][0]["content"]
    # The model saw the closest facts (most shared terms first) numbered from 1, never their
    # database ids.
    assert (
        "Known facts:\n1. 用户喜欢咖啡\n2. 用户住在杭州\n\nAnswer with one JSON" in extract_system
    )
    city.refresh_from_db()
    coffee.refresh_from_db()
    assert city.status == "superseded"
    assert city.superseded_by.content == "用户住在上海"
    assert (coffee.content, coffee.confidence, coffee.hit_count) == ("用户喜欢美式咖啡", 0.84, 2)
    assert list(coffee.events.values_list("event", "old_content", "new_content")) == [
        ("update", "用户喜欢咖啡", "用户喜欢美式咖啡")
    ]
    assert Fact.objects.get(content="用户养了一只猫").status == "active"


def test_capacity_evicts_the_least_trusted_least_used(owner, llm_config, settings):
    settings.ETHAN_FACT_CAPACITY = 2
    keep = Fact.objects.create(
        owner=owner, content="keep", content_key="a", confidence=0.95, source="admin"
    )
    Fact.objects.create(
        owner=owner, content="weak", content_key="b", confidence=0.4, source="admin"
    )
    session = _rounds(owner, ["我更喜欢简短的回答。", "你好", "再见"])
    report = consolidation_run(session_id=session.pk, config=SMALL)
    assert report.evicted == 1
    assert list(
        Fact.objects.filter(status="active").order_by("id").values_list("content", flat=True)
    ) == ["keep", "用户更喜欢简短的回答"]
    weak = Fact.objects.get(content="weak")
    assert weak.status == "evicted"
    assert list(weak.events.values_list("event", flat=True)) == ["evict"]
    assert keep.status == "active"


def test_running_twice_writes_once(owner, llm_config):
    session = _rounds(owner, [f"第{n}轮" for n in range(8)])
    config = MemoryConfig(hot_size=2, compress_batch=2, warm_capacity=100)
    assert consolidation_run(session_id=session.pk, config=config).summaries == 3
    assert consolidation_run(session_id=session.pk, config=config).summaries == 0
    assert Summary.objects.count() == 3


def test_a_racing_worker_that_claims_first_wins(owner, llm_config, monkeypatch):
    """Between our model call and our claim another worker stored the batch and its facts: we
    store nothing, neither the summary nor the facts."""
    session = _rounds(owner, ["我住在成都。", "第1轮", "第2轮"])
    config = MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=100)
    real_consolidate = consolidator.llm_memory.consolidate

    def consolidate_while_another_worker_finishes(**kwargs):
        result = real_consolidate(**kwargs)
        WorkingState.objects.filter(session=session).update(
            compressed_through=2, extracted_through=2
        )
        Summary.objects.create(
            session=session, first_round=1, last_round=2, text="theirs", model="offline"
        )
        return result

    monkeypatch.setattr(
        consolidator.llm_memory, "consolidate", consolidate_while_another_worker_finishes
    )
    report = consolidation_run(session_id=session.pk, config=config)
    assert (report.summaries, report.extractions) == (0, 0)
    assert list(Summary.objects.values_list("text", flat=True)) == ["theirs"]
    assert not Fact.objects.exists()


def test_a_model_outage_leaves_the_cursors_for_later(owner, fakes):
    openai = fakes["openai"]
    session = _rounds(owner, ["一", "二", "三"], model="gpt-4o")
    for _ in range(3):
        openai.fake.reply(openai.error(503, "down"), status=503)
    with pytest.raises(ethan_llm.ModelUnavailable):
        consolidation_run(session_id=session.pk, config=SMALL)
    state = WorkingState.objects.get(session=session)
    assert (state.compressed_through, state.extracted_through) == (0, 0)
    assert not Summary.objects.exists()
    openai.fake.responder = lambda recorded: Reply(
        body=FakeOpenAI.text(
            json.dumps({"summary": "ok", "facts": []})
            if "extract" in recorded.body["messages"][0]["content"]
            else "ok"
        )
    )
    report = consolidation_run(session_id=session.pk, config=SMALL)
    assert (report.summaries, report.extractions, report.folds) == (2, 2, 1)


def test_idle_api_sessions_are_closed(owner, make_session):
    from datetime import timedelta

    from django.utils import timezone

    from agent_app.lifecycle import sessions_finish_idle_task
    from sessions_app.models import ChatSession

    idle = make_session(owner, "old", "reply", channel="api")
    fresh = make_session(owner, "new", "reply", channel="lark")
    console = make_session(owner, "mine", "reply", channel="console")
    ChatSession.objects.filter(pk__in=[idle.pk, console.pk]).update(
        updated_at=timezone.now() - timedelta(hours=2)
    )

    def ended() -> list[str]:
        return list(ChatSession.objects.exclude(ended_at=None).values_list("pk", flat=True))

    assert sessions_finish_idle_task() == 1
    # Only the idle API session: the Lark chat was active within the timeout, and a console
    # session ends when the console does, however long ago its last message was.
    assert ended() == [idle.pk]
    assert sessions_finish_idle_task() == 0  # a second run ends nothing more
    assert ended() == [idle.pk]
    assert set(ChatSession.objects.filter(ended_at=None).values_list("pk", flat=True)) == {
        fresh.pk,
        console.pk,
    }
    # Closing is bookkeeping: it writes no memory itself (the episode is a task of its own).
    assert not FactEvent.objects.exists()


# --- provenance: the messages a fact was said in ------------------------------------------------


def _said(session) -> list:
    return list(session.messages.filter(role__in=["user", "assistant"]).order_by("seq"))


def test_extracted_facts_know_the_turns_they_came_from(owner, fakes, caplog):
    from ethan_llm import memory as llm_memory

    openai = fakes["openai"]
    session = _rounds(owner, ["我搬到上海了。", "我养了一只猫，叫 Miso。", "好"], model="gpt-4o")
    facts = [
        {"content": "用户住在上海", "category": "knowledge", "importance": 0.8, "turns": [1]},
        # 2 is the assistant's "嗯。", 3 the cat; 9 and 0 were never shown: dropped.
        {
            "content": "用户养了一只猫叫 Miso",
            "category": "knowledge",
            "importance": 0.8,
            "turns": [3, 9, 0, 3],
        },
        {"content": "用户喜欢猫", "category": "preference", "importance": 0.8},
    ]
    answer = {"summary": "摘要1", "facts": facts}
    openai.fake.reply(openai.text(json.dumps(answer, ensure_ascii=False)))
    openai.fake.reply(openai.text("滚动摘要"))
    dropped = llm_memory.turn_numbers_dropped["gpt-4o-mini"]
    consolidation_run(
        session_id=session.pk, config=MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=2)
    )

    prompt = openai.fake.requests[0].body["messages"][1]["content"]
    assert prompt.splitlines() == [
        "[1] user: 我搬到上海了。",
        "[2] assistant: 嗯。",
        "[3] user: 我养了一只猫，叫 Miso。",
        "[4] assistant: 嗯。",
    ]
    said = _said(session)
    city, cat, likes = (Fact.objects.get(content=f["content"]) for f in facts)
    assert list(city.sources.all()) == [said[0]]
    assert list(cat.sources.all()) == [said[2]]
    assert list(likes.sources.all()) == []  # no turns named: no source, nothing invented
    assert llm_memory.turn_numbers_dropped["gpt-4o-mini"] == dropped + 2
    assert "named turn 9 of 4: dropped" in caplog.text
    assert list(cat.events.values_list("event", "sources")) == [
        ("add", [{"session_id": session.pk, "seq": said[2].seq}])
    ]


def _more_trusted_facts(owner, content: str) -> None:
    """30 facts (`content` with {n}) above an extracted one's 0.8: more than a prompt holds."""
    from memory_app.services import fact_write

    for n in range(30):
        fact_write(
            owner=owner,
            content=content.format(n=n),
            category="knowledge",
            confidence=0.85,
            source="api",
        )


def test_an_extracted_fact_is_found_by_the_words_of_the_turn_it_came_from(owner, fakes):
    """A model's fact keeps to the point; the turn it came from says more. A question in the
    turn's words gets the fact injected, among more trusted facts than the prompt has room
    for, as it does a fact written with its message."""
    from agent_app.prompts import build_system

    _more_trusted_facts(owner, "User's project number {n} is code-named P{n}")
    session = _rounds(
        owner, ["We finally moved! The flat looks over the river.", "ok"], model="gpt-4o"
    )
    moved = {"content": "User moved to Porto", "category": "knowledge", "importance": 0.8}
    answer = {"summary": "The move.", "facts": [moved | {"turns": [1]}]}
    fakes["openai"].fake.reply(fakes["openai"].text(json.dumps(answer)))
    consolidation_run(session_id=session.pk, config=SMALL)

    fact = Fact.objects.get(content="User moved to Porto")
    assert fact.message == _said(session)[0]
    system = build_system(owner=owner, mode="work", path="full", text="Which river is it over?")
    assert fact in system.facts


def test_what_the_assistant_opened_with_is_read_with_round_one(owner, fakes):
    """A session the assistant opened (a chat app's greeting, an imported conversation): the
    opening is turn 1 of the first batch, so a fact it holds is extracted with it as a source."""
    session = session_services.session_start(owner=owner, model="gpt-4o")
    opening = "Welcome back! How was the trip to Oslo?"
    session_services.message_append(session=session, role="assistant", content=opening)
    _rounds_into(session, ["It was great, the fjords were stunning.", "ok"])
    oslo = {"content": "User went to Oslo", "category": "knowledge", "importance": 0.8}
    answer = {"summary": "The trip.", "facts": [oslo | {"turns": [1]}]}
    fakes["openai"].fake.reply(fakes["openai"].text(json.dumps(answer)))
    consolidation_run(session_id=session.pk, config=SMALL)

    prompt = fakes["openai"].fake.requests[0].body["messages"][1]["content"]
    assert prompt.splitlines() == [
        f"[1] assistant: {opening}",
        "[2] user: It was great, the fjords were stunning.",
        "[3] assistant: 嗯。",
    ]
    assert Fact.objects.get(content="User went to Oslo").sources.get().content == opening


def test_the_hot_zone_of_a_session_the_assistant_opened_shows_the_opening(owner):
    from memory_app.working import latest_rounds_messages

    session = session_services.session_start(owner=owner)
    opening = "Welcome back! How was the trip to Oslo?"
    session_services.message_append(session=session, role="assistant", content=opening)
    _rounds_into(session, ["Great.", "ok"])
    session.refresh_from_db()
    shown = [m.content for m in latest_rounds_messages(session=session, first=1)]
    assert shown == [opening, "Great.", "嗯。", "ok", "嗯。"]
    assert [m.content for m in latest_rounds_messages(session=session, first=2)] == ["ok", "嗯。"]


def test_offline_facts_know_their_message_and_reinforcement_adds_one(owner, llm_config):
    first = _rounds(owner, ["你好", "我住在成都。", "好的"])
    consolidation_run(session_id=first.pk, config=SMALL)
    fact = Fact.objects.get()
    assert fact.content == "用户住在成都"
    assert [(m.session_id, m.content) for m in fact.sources.all()] == [(first.pk, "我住在成都。")]

    second = _rounds(owner, ["我住在成都。", "嗯", "好"])
    consolidation_run(session_id=second.pk, config=SMALL)
    fact.refresh_from_db()
    assert fact.hit_count == 2
    assert sorted(m.session_id for m in fact.sources.all()) == sorted([first.pk, second.pk])
    [reinforce] = fact.events.filter(event="reinforce")
    assert reinforce.sources == [{"session_id": second.pk, "seq": 1}]


def test_a_plain_self_statement_comes_back_when_asked_about(owner, llm_config):
    """Offline: "我女儿叫小米" said in passing becomes a fact, and a later question about the
    daughter gets it injected, among more facts than the prompt has room for."""
    from agent_app.prompts import build_system

    _more_trusted_facts(owner, "用户第{n}次提到的项目代号是 P{n}")
    session = _rounds(owner, ["我女儿叫小米，今年五岁。", "I'm flying to Oslo next week.", "好"])
    consolidation_run(session_id=session.pk, config=SMALL)
    daughter = Fact.objects.get(content__startswith="用户女儿叫小米")
    assert daughter.confidence == 0.8 and daughter.sources.get().content.startswith("我女儿")
    for question, expected in (
        ("我女儿叫什么名字？", daughter.content),
        ("When am I flying to Oslo?", "The user is flying to Oslo next week ("),
    ):
        system = build_system(owner=owner, mode="work", path="full", text=question)
        assert [fact for fact in system.facts if fact.content.startswith(expected)], question


# --- one "due" rule for the turn and the catch-up sweep -----------------------------------------


def test_catch_up_finds_a_session_due_only_for_extraction(owner, llm_config):
    """Compressed before extraction went with the batches, nothing left to compress: the old
    sweep (compression only) never picked it up; the live path's rule does."""
    from memory_app.consolidator import consolidation_catch_up

    session = _rounds(owner, ["我住在成都。", "第2轮", "第3轮"])
    WorkingState.objects.create(session=session, compressed_through=2, folded_through=2)
    assert consolidation_catch_up() == 1
    state = WorkingState.objects.get(session=session)
    assert (state.compressed_through, state.extracted_through) == (2, 2)
    fact = Fact.objects.get()
    assert (fact.content, fact.sources.get().content) == ("用户住在成都", "我住在成都。")
    assert consolidation_catch_up() == 0  # nothing due any more


def test_catch_up_leaves_an_imported_conversation_to_its_import(owner, llm_config):
    """Imported and not learnt yet (or imported with --no-learn): the sweep does not compress
    it out of order; once learnt (ended), it is like any other session."""
    from django.utils import timezone

    from memory_app.consolidator import consolidation_catch_up
    from sessions_app.models import ChatSession

    session = _rounds(owner, [f"第{n}轮" for n in range(1, 17)])
    ChatSession.objects.filter(pk=session.pk).update(channel=ChatSession.Channel.IMPORT)
    assert consolidation_catch_up() == 0
    assert not WorkingState.objects.filter(session=session).exists()
    ChatSession.objects.filter(pk=session.pk).update(ended_at=timezone.now())
    assert consolidation_catch_up() == 1


def test_the_sweep_and_the_turn_hold_the_same_sessions_due(owner):
    from itertools import product

    from django.utils import timezone

    from memory_app.working import consolidation_due, sessions_consolidation_due
    from sessions_app.models import ChatSession

    config = MemoryConfig(hot_size=2, compress_batch=2, warm_capacity=4)
    cases = {}
    for rounds, compressed, extracted, folded, ended in product(
        (0, 3, 4, 8), (0, 2, 4), (0, 2, 4, 8), (0, 4), (False, True)
    ):
        if folded > compressed:
            continue
        session = ChatSession.objects.create(
            id=f"due-{len(cases)}",
            owner=owner,
            round_count=rounds,
            ended_at=timezone.now() if ended else None,
        )
        state = WorkingState.objects.create(
            session=session,
            compressed_through=compressed,
            extracted_through=extracted,
            folded_through=folded,
        )
        cases[session.pk] = consolidation_due(session=session, state=state, config=config)
    never_consolidated = ChatSession.objects.create(id="never", owner=owner, round_count=4)
    cases[never_consolidated.pk] = consolidation_due(
        session=never_consolidated, state=None, config=config
    )
    due = set(
        sessions_consolidation_due(ChatSession.objects.all(), config=config).values_list(
            "pk", flat=True
        )
    )
    assert due == {pk for pk, is_due in cases.items() if is_due}
    assert 0 < len(due) < len(cases)


def test_an_ended_session_whose_messages_are_gone_is_caught_up_without_a_model_call(owner, fakes):
    from django.utils import timezone

    from agent_app.lifecycle import sessions_end_write
    from sessions_app.models import ChatSession

    session = ChatSession.objects.create(
        id="emptied", owner=owner, model="gpt-4o", round_count=2, ended_at=timezone.now()
    )
    assert sessions_end_write(owner_id=owner.pk, now=True) == 1
    assert WorkingState.objects.get(session=session).extracted_through == 2
    assert fakes["openai"].fake.requests == []


def test_a_resumed_session_extracts_each_round_once_across_its_end(owner, llm_config):
    """Ended at round 3 (its end extracted the hot zone, round 3), resumed: the batch of
    rounds 3-4 is summarised whole, but only round 4's facts are taken."""
    from agent_app.lifecycle import session_episode_write

    config = MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=100)
    session = _rounds(owner, ["第1轮", "第2轮", "我住在成都。"])
    consolidation_run(session_id=session.pk, config=config)  # rounds 1-2
    session_services.session_end(session=session)
    session_episode_write(session_id=session.pk)  # round 3, at the end
    city = Fact.objects.get()
    assert (city.content, city.hit_count) == ("用户住在成都", 1)
    state = WorkingState.objects.get(session=session)
    assert (state.compressed_through, state.extracted_through) == (2, 3)

    session_services.session_reopen(session=session)
    for text in ("我更喜欢简短的回答。", "好"):
        session_services.message_append(session=session, role="user", content=text)
        session_services.message_append(session=session, role="assistant", content="嗯。")
    report = consolidation_run(session_id=session.pk, config=config)  # rounds 3-4
    assert (report.summaries, report.facts) == (1, ["add"])
    assert Summary.objects.get(first_round=3).text == "用户提到：我住在成都；我更喜欢简短的回答。"
    city.refresh_from_db()
    assert city.hit_count == 1  # round 3 was not read for facts a second time
    assert Fact.objects.get(content="用户更喜欢简短的回答").sources.get().content == (
        "我更喜欢简短的回答。"
    )


def test_a_second_worker_finds_the_session_claimed_and_calls_no_model(
    owner, llm_config, monkeypatch
):
    """Claim first (issue 42): while one worker's model call runs, a second run on the same
    session (a redelivered task, the sweep) pays for no call; the first stores the batch once."""
    session = _rounds(owner, ["我住在成都。", "第1轮", "第2轮"])
    config = MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=100)
    real_consolidate = consolidator.llm_memory.consolidate
    calls = []

    def consolidate_while_a_second_worker_comes(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            second = consolidation_run(session_id=session.pk, config=config)
            assert (second.summaries, second.extractions) == (0, 0)
        return real_consolidate(**kwargs)

    monkeypatch.setattr(
        consolidator.llm_memory, "consolidate", consolidate_while_a_second_worker_comes
    )
    report = consolidation_run(session_id=session.pk, config=config)
    assert len(calls) == 1
    assert report.summaries == 1
    assert Summary.objects.count() == 1
    assert WorkingState.objects.get(session=session).claimed_by == ""  # let go


def test_a_claim_left_by_a_killed_worker_runs_out(owner, llm_config, settings):
    """A worker killed mid-call holds its claim until ETHAN_MEMORY_CLAIM_SECONDS pass; then the
    next run takes it and does the work."""
    from datetime import timedelta

    from django.utils import timezone

    session = _rounds(owner, ["我住在成都。", "第1轮", "第2轮"])
    config = MemoryConfig(hot_size=1, compress_batch=2, warm_capacity=100)
    WorkingState.objects.create(
        session=session, claimed_by="killed", claimed_until=timezone.now() + timedelta(minutes=5)
    )
    assert consolidation_run(session_id=session.pk, config=config).summaries == 0
    WorkingState.objects.filter(session=session).update(
        claimed_until=timezone.now() - timedelta(seconds=1)
    )
    assert consolidation_run(session_id=session.pk, config=config).summaries == 1


def test_the_consolidator_does_the_work_the_due_rule_names(owner, llm_config):
    """One rule (memory_app.working.work_due): after a run, the session has no work due."""
    from memory_app.working import work_due

    session = _rounds(owner, [f"第{n}轮" for n in range(13)])
    config = MemoryConfig(hot_size=2, compress_batch=2, warm_capacity=4)
    report = consolidation_run(session_id=session.pk, config=config)
    state = WorkingState.objects.get(session=session)
    session.refresh_from_db()
    assert (report.summaries, report.folds) == (5, 1)
    assert (state.compressed_through, state.extracted_through, state.folded_through) == (10, 10, 10)
    cursors = dict(compressed=10, extracted=10, folded=10, config=config)
    assert work_due(round_count=session.round_count, **cursors) is None
    assert work_due(round_count=session.round_count + 2, **cursors) == "compress"
    assert work_due(round_count=13, compressed=10, extracted=6, folded=10, config=config) == (
        "extract"
    )
    assert work_due(round_count=13, compressed=10, extracted=10, folded=6, config=config) == "fold"
