"""Episodes: when they are written, their keywords, search and recall."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from agent_app.lifecycle import session_episode_write_task, sessions_finish_idle_task
from agent_app.prompts import build_system
from episodes_app.keywords import keywords_for
from episodes_app.models import Episode
from episodes_app.selectors import (
    episodes_for_recall,
    episodes_recent,
    episodes_search,
    recall_line,
)
from episodes_app.services import episode_write
from ethan_llm.tokens import estimate_tokens
from ethan_shared import queue
from sessions_app import services as session_services
from sessions_app.models import ChatSession
from sessions_app.search import search_tokens


def conversation(owner, *user_lines: str, channel="console", model="offline") -> ChatSession:
    session = session_services.session_start(owner=owner, channel=channel, model=model)
    for line in user_lines:
        session_services.message_append(session=session, role="user", content=line)
        session_services.message_append(session=session, role="assistant", content="好的。")
    return session


def episode(owner, summary, keywords, days_ago=0, session=None):
    session = session or conversation(owner, "a", "b")
    return Episode.objects.create(
        owner=owner,
        session=session,
        session_ref=session.pk,
        summary=summary,
        keywords=keywords,
        search_tokens=search_tokens(f"{summary} {' '.join(keywords)}"),
        turn_count=2,
        model="offline",
        timestamp=timezone.now() - timedelta(days=days_ago),
    )


@pytest.mark.django_db
def test_one_round_gets_no_episode_two_get_one_and_a_resumed_session_updates_it(owner, llm_config):
    short = conversation(owner, "你好")
    assert episode_write(session=short) is None
    session = conversation(
        owner, "你好，我是张三，今天是来测试多轮记忆能力的。", "我喜欢科幻小说和苹果。"
    )
    first = episode_write(session=session)
    assert (first.turn_count, first.model, first.owner) == (2, "offline", owner)
    assert first.summary.startswith("用户提到：")
    assert first.keywords == ["你好", "张", "三", "测试", "多轮", "记忆", "能力", "科幻小说"]
    assert episode_write(session=session).pk == first.pk  # unchanged: nothing rewritten
    session_services.message_append(session=session, role="user", content="再聊聊苹果。")
    again = episode_write(session=session)
    assert (again.pk, again.turn_count) == (first.pk, 3)
    assert Episode.objects.count() == 1


def test_chinese_and_english_keywords():
    assert keywords_for(["我想去日本旅行。日本的旅行计划：先去东京，再去京都。"]) == [
        "日本",
        "旅行",
        "计划",
        "东京",
        "京都",
    ]
    assert keywords_for(["I planned the Lisbon trip. The trip to Lisbon was great, trips!"])[
        :2
    ] == ["trip", "Lisbon"]
    assert "the" not in keywords_for(["the the the cat"])


@pytest.mark.django_db
def test_search_ranks_by_term_frequency_then_recency(owner, other_owner):
    coffee = episode(owner, "聊了咖啡和咖啡豆的烘焙", ["咖啡", "烘焙"], days_ago=5)
    tea = episode(owner, "聊了茶，也提到一次咖啡", ["茶"], days_ago=1)
    episode(owner, "聊了跑步", ["跑步"], days_ago=0)
    episode(other_owner, "咖啡咖啡咖啡", ["咖啡"])
    found = episodes_search(owner=owner, query="咖啡")
    assert [item.episode.pk for item in found] == [coffee.pk, tea.pk]
    assert found[0].score > found[1].score
    assert episodes_search(owner=owner, query="滑雪") == []
    assert [e.summary for e in episodes_recent(owner=owner, limit=2)] == [
        "聊了跑步",
        "聊了茶，也提到一次咖啡",
    ]


@pytest.mark.django_db
def test_recall_on_the_full_path_only_within_budget(owner):
    old = episode(owner, "讨论了日本旅行的行程：东京、京都", ["日本", "旅行"], days_ago=40)
    episode(owner, "讨论了日本签证材料", ["日本", "签证"], days_ago=2)
    full = build_system(owner=owner, mode="work", path="full", text="我的日本旅行怎么安排？")
    assert "<episodes>" in full.text
    assert full.episodes[0].pk == old.pk  # more matching words beat recency
    assert len(full.episodes) == 2
    assert (
        "<episodes>"
        not in build_system(
            owner=owner, mode="work", path="medium", text="我的日本旅行怎么安排？"
        ).text
    )
    nothing = build_system(owner=owner, mode="work", path="full", text="推荐一本小说")
    assert "<episodes>" not in nothing.text and nothing.episodes == []
    one_line = estimate_tokens(recall_line(old))
    tight = episodes_for_recall(owner=owner, text="日本旅行", budget_tokens=one_line + 1)
    assert [e.pk for e in tight] == [old.pk]
    assert episodes_for_recall(owner=owner, text="日本旅行", budget_tokens=5) == []
    assert (
        episodes_for_recall(
            owner=owner, text="日本旅行", budget_tokens=600, exclude_session_id=old.session_ref
        )[0].pk
        != old.pk
    )


@pytest.mark.django_db(transaction=True)
def test_console_exit_and_new_write_episodes(owner, llm_config, settings):
    settings.ETHAN_EMBEDDED = True
    call_command(
        "ethan_chat",
        "--user",
        "ada",
        stdout=StringIO(),
        stdin=StringIO("我喜欢爬山。\n周末去了黄山。\n/new\n只聊一句\n/exit\n"),
    )
    first, _one_round = ChatSession.objects.order_by("created_at")
    assert Episode.objects.get().session_ref == first.pk  # the one-round session has none
    assert "爬山" in Episode.objects.get().keywords


@pytest.mark.django_db(transaction=True)
def test_idle_api_sessions_get_their_episode(owner, llm_config, settings):
    """Two short chats closed idle: together they hold four rounds, so their ends are due
    (memory_app.working.ends_due) and both episodes are written."""
    settings.ETHAN_EMBEDDED = True
    idle = conversation(owner, "帮我规划预算。", "下个月要买电脑。", channel="api")
    other = conversation(owner, "周末去爬山。", "记得带水。", channel="api")
    ChatSession.objects.filter(pk__in=[idle.pk, other.pk]).update(
        updated_at=timezone.now() - timedelta(hours=1)
    )
    assert sessions_finish_idle_task() == 2
    queue.run_deferred()
    assert set(Episode.objects.values_list("session_ref", flat=True)) == {idle.pk, other.pk}
    assert session_episode_write_task(idle.pk) is True and Episode.objects.count() == 2


@pytest.mark.django_db
def test_episodes_api(owner, other_owner):
    from rest_framework.test import APIClient

    coffee = episode(owner, "聊了咖啡和咖啡豆", ["咖啡"], days_ago=3)
    run = episode(owner, "聊了跑步", ["跑步"], days_ago=1)
    episode(other_owner, "咖啡", ["咖啡"])
    client = APIClient()
    client.force_authenticate(owner)
    newest = client.get("/api/episodes").json()
    assert [e["id"] for e in newest] == [run.pk, coffee.pk]
    assert set(newest[0]) == {
        "id",
        "session_id",
        "summary",
        "timestamp",
        "model",
        "turn_count",
        "keywords",
    }
    found = client.get("/api/episodes", {"q": "咖啡", "limit": 5}).json()
    assert [(e["id"], e["session_id"], e["keywords"]) for e in found] == [
        (coffee.pk, coffee.session_ref, ["咖啡"])
    ]
    assert client.get("/api/episodes", {"limit": 0}).status_code == 400
    assert APIClient().get("/api/episodes").status_code == 401


STORIES = (
    "Stories help my kids sleep, so I tell stories every night.",
    "We had two calls about the stories today; the calls ran late, calling is tiring.",
)


@pytest.mark.django_db
def test_keywords_are_the_words_as_said_and_search_still_meets_their_stems(owner, llm_config):
    session = conversation(owner, *STORIES)
    written = episode_write(session=session)

    # Counted by stem ("calls", "calling": one word), shown as said most often; never "stori".
    assert written.keywords == [
        "stories",
        "calls",
        "help",
        "kids",
        "sleep",
        "every",
        "night",
        "two",
    ]
    assert " stori " in written.search_tokens and " call " in written.search_tokens
    for query in ("story", "Stories", "called"):
        assert [item.episode.pk for item in episodes_search(owner=owner, query=query)] == [
            written.pk
        ]
    assert "stories, calls, help, kids" in recall_line(written)

    from django.test import Client
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(owner)
    [listed] = api.get("/api/episodes", {"q": "story"}).json()
    assert listed["keywords"] == written.keywords
    page = Client()
    page.force_login(owner)
    shown = page.get("/memory/episodes/").text
    assert '<span class="badge">stories</span> <span class="badge">calls</span>' in shown


def test_keywords_keep_the_case_of_names_and_fold_a_capital_at_a_sentence_start():
    assert keywords_for(["Porto is lovely. I saw Porto, and the API of Porto's trams. API!"]) == [
        "Porto",
        "API",
        "lovely",
        "saw",
        "trams",
    ]
    assert keywords_for(["Stories. More stories, and stories again."]) == [
        "stories",
        "more",
        "again",
    ]


@pytest.mark.django_db
def test_stored_stems_are_told_as_said_by_the_migration(owner):
    """Rows written before keywords were kept as said hold stems: the data migration shows them
    by the words of their session and summary, and leaves what it cannot tell."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("episodes_app.migrations.0004_episode_keywords_as_said")
    session = conversation(owner, *STORIES)
    old = episode(owner, "The user said: Stories help my kids sleep", ["stori", "call", "kid"])
    old.session = session
    old.save()
    gone = episode(owner, "Talked about Lisbon trips", ["lisbon", "trip", "tram", "里斯本"])
    gone.session = None
    gone.save()
    imported = episode(owner, "A person's own words", ["Porto trip", "coffee"])

    migration.keywords_forward(apps, None)

    for row in (old, gone, imported):
        row.refresh_from_db()
    assert old.keywords == ["stories", "calls", "kids"]
    assert old.search_tokens == search_tokens(f"{old.summary} stories calls kids")
    assert gone.keywords == ["Lisbon", "trips", "tram", "里斯本"]  # from the summary alone
    assert imported.keywords == ["Porto trip", "coffee"]


@pytest.mark.django_db(transaction=True)
def test_mcp_and_an_export_show_the_keywords_as_said(owner, llm_config, tmp_path):
    import json

    from rest_framework.authtoken.models import Token

    from episodes_app.files import episodes_export
    from tests.mcp_client import over_http, served_in_thread, structured

    written = episode_write(session=conversation(owner, *STORIES))
    assert written.keywords[:2] == ["stories", "calls"]

    async def search(client):
        return await client.call_tool("episodes_search", {"query": "story"})

    token = Token.objects.get_or_create(user=owner)[0].key
    with served_in_thread() as url:
        [found] = structured(over_http(url, token, search))["episodes"]
    assert found["keywords"] == written.keywords
    episodes_export(owner=owner, home=tmp_path)
    [exported] = json.loads((tmp_path / "memory/episodes.json").read_text())
    assert exported["keywords"] == written.keywords
