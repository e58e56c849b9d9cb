"""我的记忆 in Chromium, with real clicks: forget a fact and see the next turn's context leave it
out; edit one (an empty edit refused) and undo it; keep and forget from the new list, then keep
all; switch a rule off and see it leave the system prompt; open an episode's session; delete a
session after being asked. Each tab is photographed (docs/memory-*.png with
ETHAN_SCREENSHOTS=1; 我的画像 is docs/profile-page.png, from test_profile_page)."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from selenium.webdriver.common.by import By

from episodes_app.models import Episode
from memory_app import services
from memory_app.models import Fact, Procedure
from profile_app.services import profile_update
from sessions_app import services as session_services
from sessions_app.models import ChatSession
from sessions_app.search import search_tokens
from tests.browser.test_profile_page import click_and_wait_for_the_next_page

DOCS = Path(__file__).resolve().parents[2] / "docs"
PASSWORD = "a-long-pass-phrase"


def conversation(owner, channel: str, *lines: str) -> ChatSession:
    session = session_services.session_start(owner=owner, channel=channel)
    for index, line in enumerate(lines):
        role = "user" if index % 2 == 0 else "assistant"
        session_services.message_append(session=session, role=role, content=line)
    return session


def remember(owner, content, category, confidence, source, said=(), **extra) -> Fact:
    session = said[0].session if said else None
    return services.fact_write(
        owner=owner,
        content=content,
        category=category,
        confidence=confidence,
        source=source,
        session=session,
        sources=list(said),
        **extra,
    )


@pytest.fixture
def ada(db):
    """Ada and what Ethan remembers about her: two conversations, facts from both (some
    reviewed, some new since), rules, episodes and a profile; and Grace, whose memory Ada must
    never see."""
    users = get_user_model().objects
    ada = users.create_user("ada", password=PASSWORD)
    grace = users.create_user("grace", password=PASSWORD)
    porto = conversation(
        ada,
        "console",
        "我叫 Ada，住在波尔图，在一家做地图的公司当后端工程师。",
        "好的，记住了：你在波尔图做后端。",
        "以后回答尽量简短，用中文。",
        "明白，之后我会简短地用中文回答。",
    )
    beta = conversation(
        ada,
        "api",
        "We decided to ship the beta next Tuesday.",
        "Noted: the beta ships next Tuesday.",
        "My sister lives in Lisbon, I visit her in spring.",
        "Lovely. Spring in Lisbon it is.",
    )
    porto_said, beta_said = list(porto.messages.all()), list(beta.messages.all())
    facts = {
        "porto": remember(ada, "Ada 住在波尔图", "knowledge", 0.8, "consolidator", porto_said[:1]),
        "job": remember(
            ada, "Ada 是地图公司的后端工程师", "knowledge", 0.85, "consolidator", porto_said[:1]
        ),
        "short": remember(ada, "Ada 喜欢简短的中文回答", "preference", 0.9, "api"),
        "rust": remember(
            ada, "Ada writes Rust in Cursor", "knowledge", 0.7, "mcp", source_client="Cursor"
        ),
    }
    services.memory_review_all(owner=ada)  # she looked at those
    facts |= {
        "beta": remember(
            ada, "The beta ships next Tuesday", "decision", 0.95, "agent_proactive", beta_said[:1]
        ),
        "sister": remember(
            ada, "Ada's sister lives in Lisbon", "knowledge", 0.8, "consolidator", beta_said[2:3]
        ),
        "spring": remember(
            ada, "Ada visits Lisbon every spring", "knowledge", 0.6, "consolidator", beta_said[2:3]
        ),
    }
    rules = {
        "chinese": services.procedure_write(owner=ada, rule="回答尽量简短，用中文")[0],
        "python": services.procedure_write(
            owner=ada, rule="Show code in Python unless asked otherwise", context="she said so"
        )[0],
        "formal": services.procedure_write(owner=ada, rule="Use a formal tone", active=False)[0],
    }
    episodes = {}
    for name, session, summary, keywords, days_ago in (
        (
            "porto",
            porto,
            "Ada 介绍了自己：住在波尔图，做地图公司的后端；希望回答简短、用中文。",
            ["波尔图", "后端", "中文"],
            2,
        ),
        (
            "beta",
            beta,
            "Ada decided to ship the beta next Tuesday and talked about her sister in Lisbon.",
            ["beta", "Lisbon", "sister"],
            0,
        ),
    ):
        episodes[name] = Episode.objects.create(
            owner=ada,
            session=session,
            session_ref=session.pk,
            summary=summary,
            keywords=keywords,
            search_tokens=search_tokens(f"{summary} {' '.join(keywords)}"),
            turn_count=2,
            model="offline",
            timestamp=timezone.now() - timedelta(days=days_ago),
        )
    profile_update(owner=ada, section="basic", entry="名字：Ada")
    remember(grace, "Grace lives in Lisbon", "knowledge", 0.9, "api")
    services.procedure_write(owner=grace, rule="Call me Grace")
    conversation(grace, "console", "Grace here, hello", "Hello Grace")
    return {
        "user": ada,
        "facts": facts,
        "rules": rules,
        "episodes": episodes,
        "sessions": {"porto": porto, "beta": beta},
    }


def log_in(browser, live_server, path: str = "/memory/") -> None:
    browser.get(f"{live_server.url}{path}")
    assert "/accounts/login/" in browser.current_url  # login required
    browser.find_element(By.ID, "id_username").send_keys("ada")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_wait_for_the_next_page(browser, "login")
    assert browser.current_url == f"{live_server.url}{path}"


def context_system(browser, live_server, message: str) -> str:
    """What the next turn would send (GET /api/context, as the signed-in browser)."""
    query = urlencode({"message": message, "path": "full"})
    browser.get(f"{live_server.url}/api/context?{query}")
    return json.loads(browser.find_element(By.TAG_NAME, "pre").text)["system"]


def photograph(browser, tmp_path, name: str, prefix: str = "memory-") -> None:
    """A screenshot of the whole page (up to 2,000 pixels high); kept in docs/ as
    <prefix><name>.png when ETHAN_SCREENSHOTS is set."""
    shot = tmp_path / f"{prefix}{name}.png"
    width, height = browser.get_window_size()["width"], browser.get_window_size()["height"]
    page = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(max(page + 140, 600), 2000))
    browser.save_screenshot(str(shot))
    browser.set_window_size(width, height)
    assert shot.stat().st_size > 10_000
    if os.environ.get("ETHAN_SCREENSHOTS"):
        shutil.copy(shot, DOCS / shot.name)


def messages_text(browser) -> str:
    return browser.find_element(By.CLASS_NAME, "messages").text


def text(browser) -> str:
    return browser.find_element(By.TAG_NAME, "main").text


@pytest.mark.django_db(transaction=True)
def test_forget_a_fact_and_the_next_turn_leaves_it_out(browser, live_server, tmp_path, ada):
    sister = ada["facts"]["sister"]
    log_in(browser, live_server)
    assert "Grace" not in text(browser)
    photograph(browser, tmp_path, "facts")
    assert "Ada's sister lives in Lisbon" in context_system(
        browser, live_server, "Where does my sister live?"
    )

    browser.get(f"{live_server.url}/memory/")
    click_and_wait_for_the_next_page(browser, f"forget-{sister.pk}")

    assert "已忘记 / Forgotten: “Ada's sister lives in Lisbon”" in messages_text(browser)
    assert not browser.find_elements(By.ID, f"fact-{sister.pk}")
    assert Fact.objects.get(pk=sister.pk).status == Fact.Status.EVICTED
    assert "Ada's sister lives in Lisbon" not in context_system(
        browser, live_server, "Where does my sister live?"
    )


@pytest.mark.django_db(transaction=True)
def test_edit_a_fact_then_undo_it(browser, live_server, tmp_path, ada):
    porto = ada["facts"]["porto"]
    log_in(browser, live_server)
    click_and_wait_for_the_next_page(browser, f"fact-{porto.pk}-link")

    editor = browser.find_element(By.ID, "edit-content")
    editor.clear()
    click_and_wait_for_the_next_page(browser, "save")  # empty: refused, with the reason
    assert (
        "没有保存 / Not saved: a fact needs words" in browser.find_element(By.ID, "edit-error").text
    )
    assert Fact.objects.get(pk=porto.pk).content == "Ada 住在波尔图"

    editor = browser.find_element(By.ID, "edit-content")
    editor.clear()
    editor.send_keys("Ada lives in Lisbon now")
    click_and_wait_for_the_next_page(browser, "save")
    assert browser.find_element(By.ID, "fact-content").text == "Ada lives in Lisbon now"
    history = browser.find_element(By.ID, "history").text
    assert "修改 / Edited" in history and "user:ada" in history
    photograph(browser, tmp_path, "fact")

    click_and_wait_for_the_next_page(browser, "undo")
    assert "已撤销 / Undone: “Ada 住在波尔图”" in messages_text(browser)
    assert browser.find_element(By.ID, "fact-content").text == "Ada 住在波尔图"
    assert Fact.objects.get(pk=porto.pk).content == "Ada 住在波尔图"
    assert "Ada 住在波尔图" in context_system(browser, live_server, "我住在哪里？")


@pytest.mark.django_db(transaction=True)
def test_keep_and_forget_from_the_new_list_then_keep_all(browser, live_server, tmp_path, ada):
    facts = ada["facts"]
    log_in(browser, live_server, "/memory/new/")
    shown = [row.get_attribute("id") for row in browser.find_elements(By.CSS_SELECTOR, "tr[id]")]
    assert shown == [f"new-{facts[name].pk}" for name in ("spring", "sister", "beta")]
    photograph(browser, tmp_path, "new")

    click_and_wait_for_the_next_page(browser, f"keep-{facts['beta'].pk}")
    assert "已保留 / Kept: “The beta ships next Tuesday”" in messages_text(browser)
    click_and_wait_for_the_next_page(browser, f"forget-{facts['spring'].pk}")
    shown = [row.get_attribute("id") for row in browser.find_elements(By.CSS_SELECTOR, "tr[id]")]
    assert shown == [f"new-{facts['sister'].pk}"]
    assert Fact.objects.get(pk=facts["spring"].pk).status == Fact.Status.EVICTED
    assert Fact.objects.get(pk=facts["beta"].pk).status == Fact.Status.ACTIVE

    click_and_wait_for_the_next_page(browser, "keep-all")
    assert browser.find_element(By.ID, "empty").text.startswith("没有新记住的")
    assert Fact.objects.get(pk=facts["sister"].pk).status == Fact.Status.ACTIVE


@pytest.mark.django_db(transaction=True)
def test_switch_a_rule_off_and_it_leaves_the_system_prompt(browser, live_server, tmp_path, ada):
    rule = ada["rules"]["python"]
    log_in(browser, live_server)
    click_and_wait_for_the_next_page(browser, "tab-procedures")
    photograph(browser, tmp_path, "procedures")
    assert "Show code in Python" in context_system(browser, live_server, "hello")

    browser.get(f"{live_server.url}/memory/procedures/")
    click_and_wait_for_the_next_page(browser, f"switch-{rule.pk}")

    assert "已关闭 / Off: “Show code in Python unless asked otherwise”" in messages_text(browser)
    assert "关闭 / Off" in browser.find_element(By.ID, f"procedure-{rule.pk}").text
    assert Procedure.objects.get(pk=rule.pk).active is False
    assert "Show code in Python" not in context_system(browser, live_server, "hello")


@pytest.mark.django_db(transaction=True)
def test_open_an_episodes_session_and_delete_a_session_after_asking(
    browser, live_server, tmp_path, ada
):
    beta, porto = ada["sessions"]["beta"], ada["sessions"]["porto"]
    log_in(browser, live_server)
    click_and_wait_for_the_next_page(browser, "tab-episodes")
    photograph(browser, tmp_path, "episodes")

    click_and_wait_for_the_next_page(browser, f"episode-link-{ada['episodes']['beta'].pk}")

    assert browser.current_url == f"{live_server.url}/memory/sessions/{beta.pk}/"
    said = browser.find_element(By.ID, "m1").text
    assert "We decided to ship the beta next Tuesday." in said
    assert "My sister lives in Lisbon" in browser.find_element(By.ID, "messages").text
    assert "The beta ships next Tuesday" in browser.find_element(By.ID, "learnt").text
    photograph(browser, tmp_path, "session")

    click_and_wait_for_the_next_page(browser, "tab-sessions")
    assert "Grace" not in text(browser)
    photograph(browser, tmp_path, "sessions")
    click_and_wait_for_the_next_page(browser, f"delete-{porto.pk}")
    assert "删除这次会话？" in text(browser)
    assert ChatSession.objects.filter(pk=porto.pk).exists()  # asked first
    click_and_wait_for_the_next_page(browser, "confirm-delete")
    assert f"已删除 / Deleted: {porto.pk}" in messages_text(browser)
    assert not ChatSession.objects.filter(pk=porto.pk).exists()

    click_and_wait_for_the_next_page(browser, "tab-profile")
    assert browser.current_url == f"{live_server.url}/profile/"
    assert "名字：Ada" in browser.find_element(By.ID, "rendered").text
    assert "current" in browser.find_element(By.ID, "tab-profile").get_attribute("class")
