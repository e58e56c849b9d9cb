"""Every conversation is remembered when it ends, not only long ones: the facts of the rounds
still in the hot zone are extracted in the same call that writes the episode, when a console
exits (embedded: before the process ends, or at the next start if the model was down then)
and when an API session is closed idle."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.html import escape

from agent_app.lifecycle import sessions_finish_idle_task
from episodes_app.models import Episode
from ethan_llm.text import dated
from ethan_shared import queue
from memory_app.models import Fact, WorkingState
from sessions_app.models import ChatSession, Message
from tests.channels.test_memory_page import client_for
from tests.conftest import run_ethan
from tests.fakes.base import Reply
from tests.fakes.openai_fake import FakeOpenAI, MiniModel

SAID = ["I live in Lisbon.", "我女儿叫小米。", "My dog is called Max.", "下周我要去东京出差。"]


class CompressionDown(MiniModel):
    """MiniModel whose compression model answers 503 while `down` (the chats still answer)."""

    def __init__(self, fake: FakeOpenAI) -> None:
        super().__init__()
        self.fake = fake
        self.down = False

    def __call__(self, recorded):
        if self.down and recorded.body["model"] != "gpt-4o":
            return Reply(503, self.fake.error_body(503, "The server is overloaded"))
        return super().__call__(recorded)


def test_a_console_exit_remembers_the_conversation_for_the_next_run(tmp_path):
    fake = FakeOpenAI()
    mini = fake.responder = CompressionDown(fake)
    env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{fake.url}/v1",
        "ETHAN_COMPRESSION_MODEL": "gpt-4o-mini",
        "ETHAN_MODEL_RETRIES": "0",
    }
    try:
        # The compression model is down as the first console exits: nothing is lost, the
        # session's end is left for the next start.
        mini.down = True
        first = run_ethan(
            ["--user", "ada", "--model", "gpt-4o"],
            tmp_path,
            stdin="\n".join(SAID[:2]) + "\n",
            **env,
        )
        assert first.returncode == 0, first.stderr
        assert "Remembering this conversation…" in first.stdout.splitlines()[-2]
        assert mini.calls == []

        mini.down = False
        second = run_ethan(
            ["--user", "ada", "--model", "gpt-4o"],
            tmp_path,
            stdin="\n".join(SAID[2:]) + "\n",
            **env,
        )
        assert second.returncode == 0, second.stderr
        assert second.stdout.splitlines()[0] == "Remembered your earlier conversation."
        # The first conversation's facts were in the second one's prompt.
        chats = [r.body for r in fake.requests if r.body["model"] == "gpt-4o"]
        system = chats[2]["messages"][0]["content"]
        assert "用户说过：I live in Lisbon." in system and "用户说过：我女儿叫小米。" in system
        # Each conversation's end: one call for its episode and its facts.
        assert mini.calls == ["consolidate", "consolidate"]
        third = run_ethan(["--user", "ada"], tmp_path, stdin="/exit\n", **env)
        assert "Remembered" not in third.stdout  # nothing left pending
        assert mini.calls == ["consolidate", "consolidate"]
    finally:
        fake.close()


@pytest.mark.django_db
def test_a_six_round_api_session_closed_idle_has_its_facts_each_round_once(
    owner, api_for, fakes, settings, django_capture_on_commit_callbacks
):
    """Six rounds over /api/chat (none leaves the hot zone), then idle: the one call at its
    end writes the episode and a fact per round, each tied to its message."""
    settings.ETHAN_EMBEDDED = True
    mini = fakes["openai"].fake.responder = MiniModel()
    client = api_for(owner)
    session_id = None
    said = [*SAID, "I work at Acme as a designer.", "我对花生过敏。"]
    for text in said:
        body = {
            "message": text,
            "model": "gpt-4o",
            **({"session_id": session_id} if session_id else {}),
        }
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post("/api/chat", body, format="json")
        assert response.status_code == 200, response.content
        session_id = response.json()["session_id"]
        queue.run_deferred()
    assert not Fact.objects.exists()  # the hot zone: nothing extracted while it is going on
    ChatSession.objects.filter(pk=session_id).update(
        updated_at=timezone.now() - timedelta(minutes=settings.ETHAN_SESSION_IDLE_MINUTES + 1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_finish_idle_task() == 1
    queue.run_deferred()

    assert mini.calls == ["consolidate"]
    facts = Fact.objects.filter(owner=owner).order_by("id")
    users = Message.objects.filter(session_id=session_id, role="user").order_by("seq")
    # A relative date ("下周") is dated from when it was said (ethan_llm.text.dated).
    assert [(fact.content, fact.source) for fact in facts] == [
        (dated(f"用户说过：{m.content}", said_at=timezone.localtime(m.created_at)), "consolidator")
        for m in users
    ]
    assert "下周（" in facts[3].content
    assert [list(fact.sources.all()) for fact in facts] == [[message] for message in users]
    state = WorkingState.objects.get(session_id=session_id)
    assert (state.compressed_through, state.extracted_through) == (0, 6)
    episode = Episode.objects.get(session_ref=session_id)
    assert (episode.summary, episode.turn_count) == ("摘要1", 6)

    # Closed again (a second sweep, a redelivered task): nothing is extracted twice.
    from agent_app.lifecycle import session_episode_write

    assert session_episode_write(session_id=session_id) is True
    assert mini.calls == ["consolidate"]
    assert Fact.objects.count() == 6 and all(fact.hit_count == 1 for fact in facts)

    # 我记忆's New tab lists what the session's end learnt, each with the turn it came from.
    page = client_for(owner).get("/memory/new/").content.decode()
    for fact, message in zip(facts, users, strict=True):
        row = page.split(f'id="new-{fact.pk}"', 1)[1].split("</tr>", 1)[0]
        assert f"{session_id} #{message.seq}" in row
        assert f'<q class="said">{escape(message.content)}</q>' in row


def test_a_closed_terminal_ends_the_console_and_remembers_the_conversation(tmp_path):
    """SIGHUP (the terminal window closed) ends the session as /exit does: its facts are
    extracted before the process goes."""
    import signal
    import sqlite3
    import sys

    import pexpect

    from tests.conftest import ROOT, clean_env

    console = pexpect.spawn(
        sys.executable,
        ["-m", "ethan_site.cli", "--user", "ada"],
        cwd=str(ROOT),
        env=clean_env(tmp_path, PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm"),
        encoding="utf-8",
        timeout=30,
    )
    prompt = r"\x1b\[\?2004h.*?>.*?\x1b\[\?25h"
    console.expect(prompt)
    console.send("我住在成都。\r")
    console.expect(prompt)
    console.kill(signal.SIGHUP)
    console.expect(pexpect.EOF)
    console.close()
    with sqlite3.connect(tmp_path / "ethan.sqlite3") as db:
        ended = db.execute("SELECT ended_at FROM sessions_app_chatsession").fetchall()
        facts = db.execute("SELECT content FROM memory_app_fact").fetchall()
    assert len(ended) == 1 and ended[0][0] is not None
    assert facts == [("用户住在成都",)]


@pytest.mark.django_db
def test_a_companion_session_end_extracts_feelings_too_and_one_round_gets_its_facts(
    owner, llm_config
):
    from agent_app.lifecycle import session_episode_write, session_finish
    from profile_app.models import ProfileSection
    from sessions_app import services as session_services

    companion = session_services.session_start(owner=owner, mode="companion", model="offline")
    for text in ("我是后端工程师。最近压力很大，晚上失眠。", "听音乐能让我放松。"):
        session_services.message_append(session=companion, role="user", content=text)
        session_services.message_append(session=companion, role="assistant", content="嗯。")
    session_finish(session=companion)
    assert session_episode_write(session_id=companion.pk) is True
    psych = ProfileSection.objects.get(owner=owner, key="psych").content
    assert psych == "- 最近压力很大，晚上失眠\n- 听音乐能让用户放松"
    assert list(Fact.objects.values_list("content", flat=True)) == ["用户是后端工程师"]

    # One round: no episode, but its facts.
    short = session_services.session_start(owner=owner, model="offline")
    session_services.message_append(session=short, role="user", content="我住在成都。")
    session_services.message_append(session=short, role="assistant", content="好的。")
    session_finish(session=short)
    assert session_episode_write(session_id=short.pk) is False
    assert Fact.objects.filter(session=short).get().content == "用户住在成都"
    assert not Episode.objects.filter(session_ref=short.pk).exists()


# --- short chats' ends, batched (memory_app.working.ends_due) -----------------------------------


def _chat(owner, *said: str, ended_minutes_ago: int = 0) -> ChatSession:
    """An API session with a round per line, ended `ended_minutes_ago`, its end not run yet."""
    from sessions_app import services as session_services

    session = session_services.session_start(owner=owner, channel="api", model="gpt-4o")
    for text in said:
        session_services.message_append(session=session, role="user", content=text)
        session_services.message_append(session=session, role="assistant", content="好的。")
    session_services.session_end(session=session)
    ChatSession.objects.filter(pk=session.pk).update(
        ended_at=timezone.now() - timedelta(minutes=ended_minutes_ago)
    )
    session.refresh_from_db()
    return session


@pytest.mark.django_db
def test_short_chats_ends_wait_for_each_other_then_share_one_call(
    owner, fakes, settings, django_capture_on_commit_callbacks
):
    """A two-round chat's end waits (fewer than ETHAN_MEMORY_END_BATCH_ROUNDS rounds); the
    next short chat's end makes four: one call writes both episodes and every fact, each fact
    in the session and with the message it was said in."""
    from agent_app.lifecycle import session_finish, sessions_end_write

    settings.ETHAN_EMBEDDED = True
    mini = fakes["openai"].fake.responder = MiniModel()
    first = _chat(owner, "I live in Lisbon.", "我女儿叫小米。")
    with django_capture_on_commit_callbacks(execute=True):
        session_finish(session=first)  # ended again: queues its end, as an idle close does
    queue.run_deferred()
    assert mini.calls == [] and not Fact.objects.exists() and not Episode.objects.exists()

    second = _chat(owner, "My dog is called Max.", "下周我要去东京出差。")
    with django_capture_on_commit_callbacks(execute=True):
        session_finish(session=second)
    queue.run_deferred()
    assert mini.calls == ["consolidate_sessions"]
    episodes = Episode.objects.order_by("session_ref")
    assert {(e.session_ref, e.summary) for e in episodes} == {
        (first.pk, "会话摘要1"),
        (second.pk, "会话摘要2"),
    }
    facts = Fact.objects.order_by("id")
    tokyo = second.messages.get(content="下周我要去东京出差。")
    assert [(f.content, f.session_id) for f in facts] == [
        ("用户说过：I live in Lisbon.", first.pk),
        ("用户说过：我女儿叫小米。", first.pk),
        ("用户说过：My dog is called Max.", second.pk),
        (
            dated(f"用户说过：{tokyo.content}", said_at=timezone.localtime(tokyo.created_at)),
            second.pk,
        ),
    ]
    for fact in facts:
        source = fact.sources.get()
        said = dated(source.content, said_at=timezone.localtime(source.created_at))
        assert fact.content.endswith(said) and source.session_id == fact.session_id
    for session in (first, second):
        state = WorkingState.objects.get(session=session)
        assert state.extracted_through == 2
    # Again (a redelivered task, the sweep): nothing left to do.
    assert sessions_end_write(owner_id=owner.pk, now=True) == 0
    assert mini.calls == ["consolidate_sessions"] and Fact.objects.count() == 4


@pytest.mark.django_db
def test_a_lone_short_chat_is_finished_by_the_sweep_once_it_has_waited(
    owner, fakes, settings, django_capture_on_commit_callbacks
):
    from agent_app.lifecycle import sessions_end_sweep

    settings.ETHAN_EMBEDDED = True
    mini = fakes["openai"].fake.responder = MiniModel()
    fresh = _chat(owner, "I live in Lisbon.", "ok", ended_minutes_ago=5)
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_end_sweep() == 0  # not due: two rounds, five minutes
    queue.run_deferred()
    assert mini.calls == []

    ChatSession.objects.filter(pk=fresh.pk).update(
        ended_at=timezone.now() - timedelta(minutes=settings.ETHAN_MEMORY_END_WAIT_MINUTES)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_end_sweep() == 1
    queue.run_deferred()
    assert mini.calls == ["consolidate"]  # one session: the one-session call
    assert Episode.objects.get().session_ref == fresh.pk
    assert sorted(Fact.objects.values_list("content", flat=True)) == [
        "用户说过：I live in Lisbon.",
        "用户说过：ok",
    ]
    assert sessions_end_sweep() == 0


@pytest.mark.django_db
def test_a_batch_call_stores_nothing_of_a_session_another_worker_finished(
    owner, fakes, monkeypatch
):
    """While one worker's call runs past its claim (slower than ETHAN_MEMORY_CLAIM_SECONDS),
    another takes the claim and finishes one of its sessions: the first stores the other
    session's facts and episode only, so every fact exists exactly once."""
    from agent_app import lifecycle
    from ethan_llm import memory as llm_memory

    fakes["openai"].fake.responder = MiniModel()
    first = _chat(owner, "I live in Lisbon.", "ok", ended_minutes_ago=2)
    second = _chat(owner, "My dog is called Max.", "fine", ended_minutes_ago=1)
    real = llm_memory.consolidate_sessions

    def racing(**kwargs):
        answer = real(**kwargs)
        WorkingState.objects.update(claimed_until=timezone.now() - timedelta(seconds=1))
        lifecycle.session_episode_write(session_id=first.pk)  # the other worker, first
        return answer

    monkeypatch.setattr(llm_memory, "consolidate_sessions", racing)
    assert lifecycle.sessions_end_write(owner_id=owner.pk) == 1  # due: four rounds
    assert sorted(Fact.objects.values_list("content", "session_id")) == [
        ("用户说过：I live in Lisbon.", first.pk),
        ("用户说过：My dog is called Max.", second.pk),
        ("用户说过：fine", second.pk),
        ("用户说过：ok", first.pk),
    ]
    assert dict(Episode.objects.values_list("session_ref", "summary")) == {
        first.pk: "摘要1",
        second.pk: "会话摘要2",
    }


@pytest.mark.django_db
def test_a_worker_finding_the_sessions_claimed_makes_no_call(owner, fakes, monkeypatch):
    """Claim first (issue 42): while one worker's call for two ends runs, a second worker
    ending the same person's sessions finds them claimed and calls no model; the first stores
    everything once."""
    from agent_app import lifecycle
    from ethan_llm import memory as llm_memory

    fakes["openai"].fake.responder = MiniModel()
    first = _chat(owner, "I live in Lisbon.", "ok", ended_minutes_ago=2)
    second = _chat(owner, "My dog is called Max.", "fine", ended_minutes_ago=1)
    real = llm_memory.consolidate_sessions
    calls = []

    def counted(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            assert lifecycle.sessions_end_write(owner_id=owner.pk) == 0  # the second worker
        return real(**kwargs)

    monkeypatch.setattr(llm_memory, "consolidate_sessions", counted)
    assert lifecycle.sessions_end_write(owner_id=owner.pk) == 2
    assert len(calls) == 1
    assert Fact.objects.count() == 4
    assert sorted(Episode.objects.values_list("session_ref", flat=True)) == sorted(
        [first.pk, second.pk]
    )
    # Let go on every path: nothing is left claimed.
    assert not WorkingState.objects.exclude(claimed_by="").exists()


@pytest.mark.django_db
def test_a_long_session_ends_in_a_call_of_its_own_beside_the_short_ones(owner, fakes, settings):
    from agent_app.lifecycle import sessions_end_write
    from memory_app.consolidator import consolidation_run

    settings.ETHAN_EMBEDDED = True
    mini = fakes["openai"].fake.responder = MiniModel()
    short = _chat(owner, "I live in Lisbon.", ended_minutes_ago=3)
    long = _chat(owner, *[f"第{n}轮" for n in range(1, 17)], ended_minutes_ago=2)
    consolidation_run(session_id=long.pk)  # its batch of rounds 1-5 left the hot zone
    other = _chat(owner, "My dog is called Max.", ended_minutes_ago=1)
    assert mini.calls == ["consolidate"]
    assert sessions_end_write(owner_id=owner.pk) == 3
    assert mini.calls == ["consolidate", "consolidate", "consolidate_sessions"]
    assert set(Episode.objects.values_list("session_ref", flat=True)) == {long.pk}  # 2+ rounds
    assert Fact.objects.filter(session=short).get().content == "用户说过：I live in Lisbon."
    assert Fact.objects.filter(session=other).get().content == "用户说过：My dog is called Max."
    assert WorkingState.objects.get(session=long).extracted_through == 16
