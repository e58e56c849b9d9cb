"""The agent turn: the exact system prompt, the tool loop through the fakes, what is stored."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agent_app import prompts
from agent_app.prompts import build_system
from agent_app.turn import TurnInputError
from channels_app.turns import TurnFailed, turn_run
from memory_app.models import Fact, Procedure, Summary, WorkingState
from memory_app.working import context_assemble, context_parts
from profile_app.models import ProfileRevision, ProfileSection
from sessions_app import services as session_services
from sessions_app.models import ChatSession, Message

pytestmark = pytest.mark.django_db


def context_of(*, session, exclude_fact_ids=(), current_input=None):
    """What the turn's context would be: its two steps, reading then assembling."""
    parts = context_parts(session=session, current_input=current_input)
    return context_assemble(session=session, parts=parts, exclude_fact_ids=exclude_fact_ids)


def fact(owner, content, confidence, minutes_ago=0, status="active", category="knowledge"):
    moment = timezone.now() - timedelta(minutes=minutes_ago)
    return Fact.objects.create(
        owner=owner,
        content=content,
        content_key=content,
        category=category,
        confidence=confidence,
        source="admin",
        status=status,
        last_accessed=moment,
    )


@pytest.fixture
def memory_state(owner, other_owner):
    """19 injectable facts, one below the threshold, one superseded, one of another owner."""
    for n in range(17):
        fact(owner, f"fact {n:02d}", round(0.35 + n * 0.03, 2), minutes_ago=n)
    fact(owner, "tie older", 0.83, minutes_ago=500)
    fact(owner, "tie newer", 0.83, minutes_ago=1)
    fact(owner, "too unsure", 0.29)
    fact(owner, "old news", 0.99, status="superseded")
    fact(other_owner, "grace's fact", 1.0)
    Procedure.objects.create(owner=owner, rule="Always reply in English", rule_key="a")
    Procedure.objects.create(owner=owner, rule="不要用韩语", rule_key="b")
    Procedure.objects.create(owner=owner, rule="inactive rule", rule_key="c", active=False)
    ProfileSection.objects.create(owner=owner, key="goals", content="- 年底前上线")
    ProfileSection.objects.create(owner=owner, key="basic", content="- 名字：Ada")


def test_exact_system_prompt_on_the_full_path(owner, memory_state):
    before = timezone.now()
    system = build_system(owner=owner, mode="work", path="full")
    # 0.35 + 0.03n: facts 16..0 by confidence; fact 16 and the two "tie" facts share 0.83 and
    # are ordered by last_accessed, newest first.
    expected_facts = [
        "- [knowledge, 0.83] tie newer",
        "- [knowledge, 0.83] fact 16",
        "- [knowledge, 0.83] tie older",
        *[f"- [knowledge, {0.35 + n * 0.03:.2f}] fact {n:02d}" for n in range(15, 3, -1)],
    ]
    assert system.text == "\n\n".join(
        [
            prompts.PERSONA_WORK,
            "<behavioral_guidelines>\n- Always reply in English\n- 不要用韩语\n"
            "</behavioral_guidelines>",
            "<memory_context>\n" + "\n".join(expected_facts) + "\n</memory_context>",
            "<user_profile>\n# 用户画像\n\n## 基础特征\n\n- 名字：Ada\n\n## 身份与背景\n\n"
            "## 目标与方向\n\n- 年底前上线\n\n## 工作与沟通方式\n\n## 心理与情绪\n\n"
            "## 个人语言与激励\n\n## 与 Agent 的约定\n</user_profile>",
        ]
    )
    assert len(system.facts) == 15
    # Building the prompt only reads: marking what was injected is a step of the turn.
    assert not Fact.objects.filter(owner=owner, last_accessed__gte=before).exists()


def test_a_turn_marks_exactly_the_facts_it_injected(owner, memory_state, llm_config):
    before = timezone.now()
    turn_run(owner=owner, session=None, text="tell me about the plan", path="full")
    injected = set(
        Fact.objects.filter(owner=owner, last_accessed__gte=before).values_list(
            "content", flat=True
        )
    )
    assert len(injected) == 15 and "too unsure" not in injected and "old news" not in injected


def test_fast_path_has_top_five_and_no_profile(owner, memory_state):
    system = build_system(owner=owner, mode="work", path="fast")
    assert [f.content for f in system.facts] == [
        "tie newer",
        "fact 16",
        "tie older",
        "fact 15",
        "fact 14",
    ]
    assert "<user_profile>" not in system.text
    assert "<behavioral_guidelines>" in system.text


def test_medium_path_has_the_profile_and_companion_persona(owner, memory_state):
    system = build_system(owner=owner, mode="companion", path="medium")
    assert system.text.startswith(prompts.PERSONA_COMPANION)
    assert "苏念" in system.text and "<user_profile>" in system.text
    assert len(system.facts) == 15


def test_empty_memory_gives_the_persona_only(owner):
    assert build_system(owner=owner, mode="work", path="full").text == prompts.PERSONA_WORK


def _history(owner, rounds: int) -> ChatSession:
    session = session_services.session_start(owner=owner)
    for n in range(rounds):
        session_services.message_append(session=session, role="user", content=f"q{n}")
        session_services.message_append(session=session, role="assistant", content=f"a{n}")
    session_services.message_append(session=session, role="user", content="now")
    return session


@pytest.mark.parametrize(("rounds", "facts"), [(3, 2), (120, 60)])
def test_prompt_and_context_cost_constant_queries(owner, rounds, facts, django_assert_num_queries):
    session = _history(owner, rounds)
    for n in range(facts):
        fact(owner, f"f{n}", 0.9)
    ProfileSection.objects.create(owner=owner, key="goals", content="- x")
    # A session past its first extraction (round 1, folded into the rolling summary) with a
    # warm summary (round 2) still on its own: both blocks have something to read.
    WorkingState.objects.create(
        session=session,
        compressed_through=max(2, rounds // 2),
        extracted_through=1,
        rolling_summary="earlier",
    )
    Summary.objects.create(session=session, first_round=2, last_round=2, text="s", model="m")
    # procedures, facts, profile sections; then the working state, the promoted facts, the
    # warm summaries and the verbatim messages (where they start is a subquery of theirs).
    # (Marking the injected facts is the turn's own step: one UPDATE more.)
    with django_assert_num_queries(7):
        build_system(owner=owner, mode="work", path="full")
        context_of(session=session)


@pytest.mark.parametrize("rounds", [4, 400])
def test_a_whole_turn_costs_the_same_queries_at_any_history_size(
    owner, rounds, llm_config, django_assert_num_queries
):
    """A full-path turn with real text, the offline model, a profile, facts, an episode to
    recall and a session that has consolidated: the same count at every size (issue target
    12; where the rest go is in docs/benchmarks.md, "Lean hot path: notes")."""
    from episodes_app.models import Episode

    session = _history(owner, rounds)
    ChatSession.objects.filter(pk=session.pk).update(model="offline")  # an ongoing session
    session.refresh_from_db()
    for n in range(20):
        fact(owner, f"用户喜欢第{n}种咖啡", 0.9)
    ProfileSection.objects.create(owner=owner, key="goals", content="- 学会做手冲咖啡")
    Episode.objects.create(
        owner=owner,
        session_ref="s_old",
        summary="聊了咖啡豆",
        keywords=["咖啡"],
        search_tokens=" 咖啡 咖啡豆 ",
        turn_count=3,
    )
    WorkingState.objects.create(session=session, compressed_through=rounds // 2)
    # The question (the session's claim, seq and the previous spoken turn: one UPDATE …
    # RETURNING; that turn's tokens: UPDATE; INSERT), the prompt and context (working state,
    # verbatim rounds, procedures, facts, profile, episodes, warm summaries: no promoted facts
    # before an extraction; marking the injected facts), the reply (seq, previous turn and the
    # claim given back: UPDATE … RETURNING; the question's tokens; INSERT): 14, plus the
    # SAVEPOINT and RELEASE that the question's transaction is inside the test's.
    with django_assert_num_queries(16):
        turn_run(
            owner=owner,
            session=session,
            text="我喜欢什么咖啡？我们之前聊过咖啡豆吗",
            model="offline",
            path="full",
        )


def test_verbatim_rounds_start_after_the_compression_cursor(owner, settings):
    settings.ETHAN_MEMORY_HOT_SIZE = 2
    session = _history(owner, 4)
    WorkingState.objects.create(session=session, compressed_through=2)
    context = context_of(session=session)
    assert [(m.role, m.content) for m in context] == [
        ("user", "q2"),
        ("assistant", "a2"),
        ("user", "q3"),
        ("assistant", "a3"),
        ("user", "now"),
    ]
    Summary.objects.create(
        session=session, first_round=1, last_round=2, text="讨论了 X", model="offline"
    )
    summary_only = context_of(session=session)
    assert [(m.role, m.content) for m in summary_only[:3]] == [
        ("user", "[对话摘要]\n讨论了 X"),
        ("assistant", "好的。"),
        ("user", "q2"),
    ]
    # An extraction (of round 1) folds into the rolling summary and promotes facts.
    WorkingState.objects.filter(session=session).update(
        rolling_summary="更早：Y", extracted_through=1
    )
    Summary.objects.filter(session=session).update(first_round=2)
    promoted = fact(owner, "用户是开发者", 0.8)
    Fact.objects.filter(pk=promoted.pk).update(session=session, source="consolidator")
    with_blocks = context_of(session=session)
    assert [(m.role, m.content) for m in with_blocks[:4]] == [
        ("user", "[长期记忆]\n- 用户是开发者"),
        ("assistant", "好的。"),
        ("user", "[对话摘要]\n更早：Y\n讨论了 X"),
        ("assistant", "好的。"),
    ]
    # A promoted fact already in <memory_context> is not repeated.
    without = context_of(session=session, exclude_fact_ids=[promoted.pk])
    assert without[0].content.startswith("[对话摘要]")


def test_hot_zone_leaves_out_tool_traffic(owner, llm_config):
    result = turn_run(owner=owner, session=None, text="记住我喜欢喝美式咖啡", model="offline")
    session_services.message_append(session=result.session, role="user", content="再说一次")
    context = context_of(session=result.session)
    assert [(m.role, m.content) for m in context] == [
        ("user", "记住我喜欢喝美式咖啡"),
        ("assistant", "好的，我记住了：你喜欢喝美式咖啡"),
        ("user", "再说一次"),
    ]


def test_a_round_answered_again_shows_the_model_its_latest_reply(owner, make_session):
    """A chat app's regenerate keeps both replies stored; the context holds the kept one."""
    session = make_session(owner, "name a colour", "Blue.")
    session_services.message_append(session=session, role="assistant", content="Red.")
    session_services.message_append(session=session, role="user", content="another")
    assert [(m.role, m.content) for m in context_of(session=session)] == [
        ("user", "name a colour"),
        ("assistant", "Red."),
        ("user", "another"),
    ]


def test_a_turn_asked_again_stores_no_question_and_leaves_out_the_old_reply(owner, fakes):
    from agent_app.turn import turn_plan, turn_start

    openai = fakes["openai"]
    first = turn_run(owner=owner, session=None, text="hi", model="offline")
    openai.fake.reply(openai.text("Hello again."))
    plan = turn_plan(owner=owner, session=first.session, text="hi", model="gpt-4o", again=True)
    turn = turn_start(plan)
    turn.finish()
    body = openai.fake.requests[-1].body
    assert [(m["role"], m["content"]) for m in body["messages"][1:]] == [("user", "hi")]
    assert list(first.session.messages.values_list("role", "content")) == [
        ("user", "hi"),
        ("assistant", "Hi! I'm Ethan (offline mode)."),
        ("assistant", "Hello again."),
    ]


def test_a_history_brought_along_is_stored_before_the_question(owner, llm_config):
    from agent_app.turn import turn_plan, turn_start

    history = (("user", "I moved to Lisbon"), ("assistant", "Nice."))
    plan = turn_plan(owner=owner, session=None, text="and now?", history=history)
    result = turn_start(plan)
    result.finish()
    assert list(result.session.messages.values_list("role", "content"))[:3] == [
        ("user", "I moved to Lisbon"),
        ("assistant", "Nice."),
        ("user", "and now?"),
    ]
    assert result.session.title == "I moved to Lisbon" and result.session.round_count == 2


def test_again_and_history_need_the_right_session(owner, make_session, llm_config):
    from agent_app.turn import turn_plan

    with pytest.raises(TurnInputError, match="only a stored conversation"):
        turn_plan(owner=owner, session=None, text="hi", again=True)
    session = make_session(owner, "hi", "hello")
    with pytest.raises(TurnInputError, match="can only start a new session"):
        turn_plan(owner=owner, session=session, text="hi", history=(("user", "x"),))


def test_a_fact_the_agent_writes_knows_the_message_it_was_said_in(owner, llm_config):
    result = turn_run(owner=owner, session=None, text="记住我喜欢喝美式咖啡", model="offline")
    fact = Fact.objects.get()
    question = result.session.messages.get(seq=1)
    assert question.role == "user" and list(fact.sources.all()) == [question]
    assert fact.events.get().sources == [{"session_id": result.session.pk, "seq": 1}]


def test_turn_on_the_offline_model(owner, llm_config):
    result = turn_run(owner=owner, session=None, text="你好", mode="work", channel="console")
    assert (result.reply, result.path, result.model, result.offline) == (
        "你好！我是 Ethan（离线模式）。",
        "fast",
        "offline",
        True,
    )
    assert result.model_calls == 1 and result.tool_calls == 0
    assert result.input_tokens > 0 and result.output_tokens > 0
    session = ChatSession.objects.get()
    assert (session.pk, session.channel, session.model) == (result.session.pk, "console", "offline")
    assert list(session.messages.values_list("role", "content")) == [
        ("user", "你好"),
        ("assistant", "你好！我是 Ethan（离线模式）。"),
    ]


def test_each_tool_through_a_real_provider(owner, fakes):
    openai = fakes["openai"]
    openai.fake.reply(
        openai.fake.tool_calls(
            (
                "c1",
                "memory_write",
                {"content": "用户在 Acme 做后端工程师", "category": "knowledge"},
            ),
            ("c2", "procedure_write", {"rule": "Always reply in English", "context": "asked"}),
            ("c3", "profile_update", {"section": "goals", "entry": "年底前上线"}),
        )
    )
    openai.fake.reply(openai.text("Done: noted all three."))
    result = turn_run(
        owner=owner,
        session=None,
        text="我在 Acme 做后端，以后用英文回复，目标是年底前上线",
        model="gpt-4o",
    )
    assert (result.reply, result.path, result.model_calls, result.tool_calls) == (
        "Done: noted all three.",
        "full",
        2,
        3,
    )
    assert result.input_tokens == 20 + 11 and result.output_tokens == 9 + 7

    stored = Fact.objects.get(owner=owner)
    assert (stored.content, stored.confidence, stored.source, stored.session_id) == (
        "用户在 Acme 做后端工程师",
        0.95,
        "agent_proactive",
        result.session.pk,
    )
    assert list(Procedure.objects.values_list("rule", "context", "active")) == [
        ("Always reply in English", "asked", True)
    ]
    assert ProfileSection.objects.get(owner=owner, key="goals").content == "- 年底前上线"
    assert ProfileRevision.objects.get().actor == "agent"

    rows = list(
        result.session.messages.order_by("seq").values_list(
            "role", "content", "tool_calls", "tool_call_id"
        )
    )
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
    assert [call["id"] for call in rows[1][2]] == ["c1", "c2", "c3"]
    assert [r[3] for r in rows[2:5]] == ["c1", "c2", "c3"]
    assert rows[2][1].startswith("ok: stored fact")
    assert rows[3][1].startswith("ok: rule") and rows[4][1] == (
        "ok: profile section 目标与方向 updated (append)"
    )
    # The second request carried the three results back, answering the three ids.
    second = openai.fake.requests[1].body["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in second[-3:]] == [
        ("tool", "c1"),
        ("tool", "c2"),
        ("tool", "c3"),
    ]
    # Tools are offered with their schemas.
    offered = [t["function"]["name"] for t in openai.fake.requests[0].body["tools"]]
    assert offered == ["memory_write", "procedure_write", "profile_update", "memory_search"]


def test_bad_tool_arguments_come_back_as_tool_errors(owner, fakes):
    anthropic = fakes["anthropic"]
    anthropic.fake.reply(
        anthropic.fake.message(
            {
                "type": "tool_use",
                "id": "t1",
                "name": "profile_update",
                "input": {"section": "hobbies", "entry": "chess"},
            },
            {
                "type": "tool_use",
                "id": "t2",
                "name": "memory_write",
                "input": {"content": "  ", "category": "knowledge"},
            },
            {
                "type": "tool_use",
                "id": "t3",
                "name": "memory_write",
                "input": {"content": "x", "category": "gossip"},
            },
            {"type": "tool_use", "id": "t4", "name": "send_email", "input": {}},
            stop_reason="tool_use",
        )
    )
    anthropic.fake.reply(anthropic.text("Sorry, let me fix that."))
    result = turn_run(
        owner=owner, session=None, text="remember my hobbies: chess", model="claude-sonnet-4-6"
    )
    assert result.reply == "Sorry, let me fix that."
    results = list(
        result.session.messages.filter(role="tool")
        .order_by("seq")
        .values_list("tool_call_id", "content")
    )
    assert [r[0] for r in results] == ["t1", "t2", "t3", "t4"]
    assert results[0][1].startswith("error: unknown profile section 'hobbies': use one of basic")
    assert results[1][1] == "error: content is required and must not be empty"
    assert results[2][1].startswith("error: category must be one of preference")
    assert results[3][1] == "error: there is no tool named 'send_email'"
    assert not Fact.objects.exists() and not ProfileSection.objects.exists()
    # All four errors went back to the model as tool_result blocks.
    blocks = anthropic.fake.requests[1].body["messages"][-1]["content"]
    assert [(b["type"], b["tool_use_id"]) for b in blocks] == [
        ("tool_result", "t1"),
        ("tool_result", "t2"),
        ("tool_result", "t3"),
        ("tool_result", "t4"),
    ]


def test_equal_facts_reinforce_and_rules_do_not_stack(owner, llm_config):
    for _ in range(2):
        turn_run(owner=owner, session=None, text="记住我喜欢喝美式咖啡")
        turn_run(owner=owner, session=None, text="以后回复都用英文")
    stored = Fact.objects.get()
    assert (stored.confidence, stored.hit_count) == (0.96, 2)  # 0.95 + (1 - 0.95) * 0.2
    assert list(stored.events.values_list("event", "old_confidence", "new_confidence")) == [
        ("add", None, 0.95),
        ("reinforce", 0.95, 0.96),
    ]
    assert Procedure.objects.count() == 1


def test_the_tool_loop_is_bounded(owner, fakes, settings):
    settings.ETHAN_TURN_MAX_MODEL_CALLS = 3
    gemini = fakes["gemini"]
    for n in range(2):
        gemini.fake.reply(
            gemini.fake.function_call(
                "memory_write", {"content": f"fact {n}", "category": "knowledge"}
            )
        )
    gemini.fake.reply(gemini.text("Enough tools."))
    result = turn_run(
        owner=owner, session=None, text="remember everything", model="gemini-2.5-flash"
    )
    assert (result.model_calls, result.tool_calls, result.reply) == (3, 2, "Enough tools.")
    bodies = [r.body for r in gemini.fake.requests]
    assert ["tools" in body for body in bodies] == [True, True, False]


def test_a_failing_model_keeps_the_user_message(owner, fakes):
    openai = fakes["openai"]
    for _ in range(3):
        openai.fake.reply(openai.error(429, "slow down"), status=429)
    with pytest.raises(TurnFailed, match="HTTP 429") as failed:
        turn_run(owner=owner, session=None, text="hello there", model="gpt-4o")
    session = ChatSession.objects.get()
    assert failed.value.session == session and failed.value.failed.retryable
    assert list(session.messages.values_list("role", "content")) == [("user", "hello there")]
    # The client retries on the same session: the history continues.
    openai.fake.reply(openai.text("hi!"))
    result = turn_run(owner=owner, session=session, text="hello again", model="gpt-4o")
    assert result.reply == "hi!"
    sent = openai.fake.requests[-1].body["messages"]
    assert [m["content"] for m in sent[1:]] == ["hello there", "hello again"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": "   "}, "the message is empty"),
        ({"text": "x" * 32_001}, "32001 characters long; the limit is 32000"),
        ({"text": "hi", "path": "slow"}, "unknown path 'slow'"),
        ({"text": "hi", "mode": "party"}, "unknown mode 'party'"),
        ({"text": "hi", "model": "llama"}, "unknown model 'llama'"),
    ],
)
def test_refused_turns_write_nothing(owner, llm_config, kwargs, message):
    with pytest.raises(TurnInputError, match=message):
        turn_run(owner=owner, session=None, **kwargs)
    assert not ChatSession.objects.exists() and not Message.objects.exists()


def test_resumed_session_keeps_its_mode_and_switches_model(owner, fakes):
    openai = fakes["openai"]
    first = turn_run(owner=owner, session=None, text="今天有点累", mode="陪伴", model="offline")
    assert (first.path, first.session.mode, first.model) == ("full", "companion", "offline")
    assert openai.fake.requests == []  # the offline model answered the first turn

    openai.fake.reply(openai.text("我在。"))
    again = turn_run(owner=owner, session=first.session, text="嗯", model="gpt-4o")
    assert again.path == "full"  # companion mode, kept from the session
    assert json.loads(json.dumps(again.session.mode)) == "companion"
    # The model asked for is the one called, and the session remembers it.
    assert (again.reply, again.model, again.offline) == ("我在。", "gpt-4o", False)
    assert [r.body["model"] for r in openai.fake.requests] == ["gpt-4o"]
    assert ChatSession.objects.get(pk=first.session.pk).model == "gpt-4o"

    # Resumed again without a model: the session's (switched) model answers.
    openai.fake.reply(openai.text("好的。"))
    third = turn_run(owner=owner, session=ChatSession.objects.get(pk=first.session.pk), text="好")
    assert third.model == "gpt-4o"
    assert [r.body["model"] for r in openai.fake.requests] == ["gpt-4o", "gpt-4o"]


@pytest.mark.django_db(transaction=True)
def test_a_turn_is_never_part_of_a_callers_transaction(owner, llm_config):
    """The question must be committed before the model is called, and no transaction may span
    a model call: turn_start's transaction is durable, so a caller's refuses it at once."""
    from django.db import transaction

    from agent_app.turn import turn_plan, turn_start

    plan = turn_plan(owner=owner, session=None, text="hello", model="offline")
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        turn_start(plan)
    assert not Message.objects.exists()
    # Outside one, the same plan runs.
    assert turn_run(owner=owner, session=None, text="hello", model="offline").reply
