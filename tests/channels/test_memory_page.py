"""我的记忆 (/memory/) through Django's test client: every tab, every form, every rule (two
people, 404s, CSRF, escaping, refused edits, login), and the services it added (fact_undo,
fact_keep, memory_review_all, procedure_delete)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from channels_app.memory_page.views import FACTS_PAGE_SIZE, MESSAGES_PAGE_SIZE
from episodes_app.models import Episode
from ethan_shared.limits import FACT_MAX_CHARS, RULE_MAX_CHARS
from memory_app import services
from memory_app.models import Fact, FactEvent, MemoryReview, Procedure
from profile_app.services import profile_update
from sessions_app.models import ChatSession
from sessions_app.search import search_tokens

pytestmark = pytest.mark.django_db


def fact(owner, content, *, source=Fact.Source.CONSOLIDATOR, confidence=0.8, **extra) -> Fact:
    return services.fact_write(
        owner=owner,
        content=content,
        category=extra.pop("category", Fact.Category.KNOWLEDGE),
        confidence=confidence,
        source=source,
        **extra,
    )


def episode(owner, session, summary, keywords, *, days_ago=0) -> Episode:
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


def client_for(user, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def events(fact_row: Fact) -> list[tuple]:
    return [
        (e.event, e.old_content, e.new_content, e.actor)
        for e in fact_row.events.order_by("created_at", "id")
    ]


@pytest.fixture
def memories(owner, other_owner, make_session):
    """Everything Ethan keeps about two people, each thing marked with its owner's name."""
    made = {}
    for person, name in ((owner, "Ada"), (other_owner, "Grace")):
        session = make_session(person, f"{name} lives in Porto", f"Noted, {name}.", "thanks", "ok")
        said = session.messages.get(seq=1)
        made[name] = {
            "session": session,
            "fact": fact(person, f"{name} lives in Porto", session=session, sources=[said]),
            "evicted": fact(person, f"{name} used to like tea"),
            "procedure": services.procedure_write(
                owner=person, rule=f"Call me {name} in every reply"
            )[0],
            "episode": episode(person, session, f"{name} talked about Porto", ["Porto", name]),
        }
        services.fact_set_status(
            fact=made[name]["evicted"], status=Fact.Status.EVICTED, actor="consolidator"
        )
        profile_update(owner=person, section="basic", entry=f"名字：{name}")
    return made


def pages(made: dict) -> list[str]:
    """Every page of the memory tabs for one person's things."""
    return [
        "/memory/",
        "/memory/?status=all",
        "/memory/?status=evicted",
        "/memory/new/",
        "/memory/procedures/",
        "/memory/episodes/",
        "/memory/sessions/",
        f"/memory/facts/{made['fact'].pk}/",
        f"/memory/sessions/{made['session'].pk}/",
        f"/memory/procedures/{made['procedure'].pk}/delete/",
        f"/memory/sessions/{made['session'].pk}/delete/",
        "/profile/",
    ]


# ---- login, two people, 404, CSRF, escaping -------------------------------------------------


def test_anonymous_visitors_are_sent_to_log_in(client, memories):
    ada = memories["Ada"]
    for url in pages(ada):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url
    for url in (
        f"/memory/facts/{ada['fact'].pk}/forget/",
        f"/memory/facts/{ada['fact'].pk}/edit/",
        "/memory/new/keep-all/",
        f"/memory/procedures/{ada['procedure'].pk}/switch/",
        f"/memory/sessions/{ada['session'].pk}/delete/",
    ):
        assert client.post(url, {"content": "x"}).status_code == 302, url
    assert Fact.objects.get(pk=ada["fact"].pk).status == Fact.Status.ACTIVE
    assert ChatSession.objects.filter(pk=ada["session"].pk).exists()


def test_each_person_sees_only_their_own_memory_on_every_tab(owner, other_owner, memories):
    for person, mine, theirs in ((owner, "Ada", "Grace"), (other_owner, "Grace", "Ada")):
        client = client_for(person)
        for url in pages(memories[mine]):
            response = client.get(url)
            assert response.status_code == 200, url
            assert theirs not in response.text, url
        seen = {url: client.get(url).text for url in pages(memories[mine])}
        assert f"{mine} lives in Porto" in seen["/memory/"]
        assert f"{mine} used to like tea" in seen["/memory/?status=evicted"]
        assert f"{mine} lives in Porto" in seen["/memory/new/"]
        assert f"Call me {mine} in every reply" in seen["/memory/procedures/"]
        assert f"{mine} talked about Porto" in seen["/memory/episodes/"]
        assert memories[mine]["session"].pk in seen["/memory/sessions/"]
        assert f"名字：{mine}" in seen["/profile/"]
        # Searches are scoped too: the other person's words find nothing.
        for url in ("/memory/?q=Porto", "/memory/episodes/?q=Porto", "/memory/sessions/?q=Porto"):
            found = client.get(url).text
            assert mine in found and theirs not in found, url


def test_another_persons_ids_answer_404_and_change_nothing(owner, memories):
    grace = memories["Grace"]
    client = client_for(owner)
    for url in pages(grace)[7:11]:
        assert client.get(url).status_code == 404, url
    for url, data in (
        (f"/memory/facts/{grace['fact'].pk}/edit/", {"content": "Ada wrote this"}),
        (f"/memory/facts/{grace['fact'].pk}/forget/", {}),
        (f"/memory/facts/{grace['evicted'].pk}/undo/", {}),
        (f"/memory/facts/{grace['fact'].pk}/keep/", {}),
        (f"/memory/procedures/{grace['procedure'].pk}/edit/", {"rule": "x", "context": ""}),
        (f"/memory/procedures/{grace['procedure'].pk}/switch/", {"active": "off"}),
        (f"/memory/procedures/{grace['procedure'].pk}/delete/", {}),
        (f"/memory/sessions/{grace['session'].pk}/delete/", {}),
    ):
        assert client.post(url, data).status_code == 404, url
    assert client.get("/memory/facts/999999/").status_code == 404
    assert client.get("/memory/sessions/s_nope/").status_code == 404
    kept = Fact.objects.get(pk=grace["fact"].pk)
    assert (kept.content, kept.status) == ("Grace lives in Porto", Fact.Status.ACTIVE)
    assert Fact.objects.get(pk=grace["evicted"].pk).status == Fact.Status.EVICTED
    assert Procedure.objects.get(pk=grace["procedure"].pk).active is True
    assert ChatSession.objects.filter(pk=grace["session"].pk).exists()
    assert not MemoryReview.objects.exists()


def test_every_form_is_csrf_protected(owner, memories):
    ada = memories["Ada"]
    checked = client_for(owner, enforce_csrf_checks=True)
    for url in pages(ada):
        html = checked.get(url).text
        posts = len(re.findall(r'<form[^>]*method="post"', html))
        assert posts == html.count('name="csrfmiddlewaretoken"'), url
    for url in (
        f"/memory/facts/{ada['fact'].pk}/forget/",
        f"/memory/facts/{ada['fact'].pk}/edit/",
        f"/memory/facts/{ada['evicted'].pk}/undo/",
        f"/memory/facts/{ada['fact'].pk}/keep/",
        "/memory/new/keep-all/",
        f"/memory/procedures/{ada['procedure'].pk}/switch/",
        f"/memory/procedures/{ada['procedure'].pk}/delete/",
        f"/memory/sessions/{ada['session'].pk}/delete/",
    ):
        assert checked.post(url, {"content": "changed", "active": "off"}).status_code == 403, url
    assert Fact.objects.get(pk=ada["fact"].pk).status == Fact.Status.ACTIVE
    assert Fact.objects.get(pk=ada["fact"].pk).content == "Ada lives in Porto"
    assert Procedure.objects.filter(pk=ada["procedure"].pk, active=True).exists()
    assert ChatSession.objects.filter(pk=ada["session"].pk).exists()
    assert not MemoryReview.objects.exists()


def test_markup_in_memory_is_shown_as_text(owner, make_session):
    markup = '<script>alert("x")</script><b>bold</b>'
    session = make_session(owner, f"hi {markup}", f"reply {markup}", "more", "ok")
    said = session.messages.get(seq=1)
    row = fact(owner, f"likes {markup}", sources=[said], session=session)
    services.procedure_write(owner=owner, rule=f"rule {markup}", context=f"why {markup}")
    episode(owner, session, f"summary {markup}", [markup])
    client = client_for(owner)
    for url in (
        "/memory/",
        "/memory/new/",
        f"/memory/facts/{row.pk}/",
        "/memory/procedures/",
        "/memory/episodes/",
        "/memory/sessions/",
        f"/memory/sessions/{session.pk}/",
    ):
        html = client.get(url).text
        assert "<script>alert" not in html and "<b>bold</b>" not in html, url
        # (a session's title is its first 40 characters: the markup cut short)
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;b&gt;bol" in html, url
    forgotten = client.post(f"/memory/facts/{row.pk}/forget/", follow=True).text  # a message
    assert "<script>alert" not in forgotten
    assert "已忘记 / Forgotten: “likes &lt;script&gt;alert(&quot;x&quot;)" in forgotten


# ---- 记忆 / Facts ----------------------------------------------------------------------------


def test_facts_tab_shows_each_fact_with_its_category_confidence_source_and_use(owner, memories):
    ada = memories["Ada"]
    mcp = fact(owner, "Ada writes Rust", source=Fact.Source.MCP, source_client="Cursor")
    mcp.hit_count = 4
    mcp.save(update_fields=["hit_count"])
    html = client_for(owner).get("/memory/").text
    row = html[html.index(f'id="fact-{mcp.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "知识 / Knowledge" in row
    assert '<span style="width: 80%"></span>' in row and "0.80" in row  # the bar
    assert "MCP · Cursor" in row
    assert "<td>4</td>" in row  # hits
    assert timezone.localtime(mcp.last_accessed).strftime("%Y-%m-%d %H:%M") in row
    said = ada["session"].messages.get(seq=1)
    link = f"/memory/sessions/{ada['session'].pk}/#m{said.seq}"
    assert f'href="{link}"' in html  # where Ada's fact was said
    assert "后台整理 / Consolidator" in html


def test_a_facts_source_turn_is_shown_beside_its_link_only_its_start(owner, make_session):
    long = "我住在里斯本，" + "每天早上去河边跑步。" * 200  # 2,007 characters
    session = make_session(owner, long, "好的")
    learnt = fact(owner, "用户住在里斯本", sources=[session.messages.get(seq=1)])
    html = client_for(owner).get("/memory/").text
    row = html[html.index(f'id="fact-{learnt.pk}"') :]
    row = row[: row.index("</tr>")]
    said = row.split('<q class="said">', 1)[1].split("</q>", 1)[0]
    assert said == long[:119] + "…"


def test_facts_tab_searches_filters_sorts_and_pages(owner):
    tea = fact(owner, "Ada drinks green tea", category=Fact.Category.PREFERENCE, confidence=0.6)
    fact(owner, "Ada decided to move to Lisbon", category=Fact.Category.DECISION, confidence=0.9)
    typed = fact(owner, "Ada likes black tea", source=Fact.Source.API, confidence=0.7)
    client = client_for(owner)

    def shown(url: str) -> list[str]:
        return re.findall(
            r'class="text" id="fact-\d+-link" href="/memory/facts/\d+/">([^<]*)<',
            client.get(url).text,
        )

    assert shown("/memory/") == [
        "Ada decided to move to Lisbon",
        "Ada likes black tea",
        "Ada drinks green tea",
    ]
    assert shown("/memory/?sort=recent") == [
        "Ada likes black tea",
        "Ada decided to move to Lisbon",
        "Ada drinks green tea",
    ]
    services.facts_mark_injected(facts=[tea])
    assert shown("/memory/?sort=used")[0] == "Ada drinks green tea"
    assert shown("/memory/?q=tea") == ["Ada likes black tea", "Ada drinks green tea"]
    assert shown("/memory/?q=green+tea") == ["Ada drinks green tea"]  # every word
    assert shown("/memory/?category=decision") == ["Ada decided to move to Lisbon"]
    assert shown("/memory/?source=api") == ["Ada likes black tea"]
    assert shown("/memory/?category=nonsense&sort=nonsense") == shown("/memory/")  # ignored
    services.fact_set_status(fact=typed, status=Fact.Status.EVICTED, actor="api:ada")
    assert shown("/memory/?status=evicted") == ["Ada likes black tea"]
    assert "Ada likes black tea" not in shown("/memory/")
    assert len(shown("/memory/?status=all")) == 3

    for n in range(FACTS_PAGE_SIZE + 2):
        fact(owner, f"Ada's number {n} is {n * 7}", confidence=0.5)
    first, second = client.get("/memory/"), client.get("/memory/?page=2")
    assert len(shown("/memory/")) == FACTS_PAGE_SIZE
    assert len(shown("/memory/?page=2")) == 4
    assert 'href="?page=2"' in first.text and 'href="?page=1"' in second.text
    assert f"共 {FACTS_PAGE_SIZE + 4} 条" in first.text


def test_the_facts_tab_costs_the_same_queries_at_any_size(
    owner, make_session, django_assert_num_queries
):
    client = client_for(owner)
    session = make_session(owner, "one", "two", "three", "four")
    said = list(session.messages.all())

    def grow(to: int) -> None:
        for n in range(Fact.objects.filter(owner=owner).count(), to):
            fact(owner, f"fact number {n}", session=session, sources=said[n % 4 : n % 4 + 2])

    grow(5)
    client.get("/memory/")  # the session and the user are read; warm
    # The session, the user, the count, the page, the page's source messages.
    with django_assert_num_queries(5):
        assert client.get("/memory/").status_code == 200
    grow(FACTS_PAGE_SIZE * 3)
    with django_assert_num_queries(5):
        assert client.get("/memory/?sort=recent&page=2").status_code == 200


def test_forget_evicts_the_fact_and_the_next_turn_no_longer_injects_it(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)
    before = client.get("/api/context", {"message": "Where does Ada live, Porto?"}).json()
    assert "Ada lives in Porto" in before["system"]

    forgotten = client.post(
        f"/memory/facts/{ada['fact'].pk}/forget/", {"next": "/memory/?q=Porto"}, follow=True
    )

    assert forgotten.redirect_chain == [("/memory/?q=Porto", 302)]
    assert "已忘记 / Forgotten: “Ada lives in Porto”" in forgotten.text
    row = Fact.objects.get(pk=ada["fact"].pk)
    assert row.status == Fact.Status.EVICTED  # kept, with its history
    assert events(row)[-1] == ("evict", "Ada lives in Porto", "Ada lives in Porto", "user:ada")
    after = client.get("/api/context", {"message": "Where does Ada live, Porto?"}).json()
    assert "Ada lives in Porto" not in after["system"]
    # `next` only ever leads back into this site.
    outside = client.post(
        f"/memory/facts/{ada['fact'].pk}/forget/", {"next": "https://example.com/"}
    )
    assert outside["Location"] == "/memory/"


def test_an_edit_is_kept_in_the_history_and_undone(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)

    saved = client.post(
        f"/memory/facts/{ada['fact'].pk}/edit/", {"content": "Ada lives in  Lisbon\r\n"}
    )

    assert saved["Location"] == f"/memory/facts/{ada['fact'].pk}/"
    row = Fact.objects.get(pk=ada["fact"].pk)
    assert row.content == "Ada lives in Lisbon"
    page = client.get(f"/memory/facts/{row.pk}/").text
    assert "<del>Ada lives in Porto</del><br>Ada lives in Lisbon" in page
    assert 'id="undo"' in page

    client.post(f"/memory/facts/{row.pk}/undo/")

    row.refresh_from_db()
    assert (row.content, row.status) == ("Ada lives in Porto", Fact.Status.ACTIVE)
    edit = row.events.get(event="edit", actor="user:ada")
    assert events(row)[1:] == [
        ("edit", "Ada lives in Porto", "Ada lives in Lisbon", "user:ada"),
        ("edit", "Ada lives in Lisbon", "Ada lives in Porto", f"user:ada (undo #{edit.pk})"),
    ]
    context = client.get("/api/context", {"message": "Porto or Lisbon?"}).json()["system"]
    assert "Ada lives in Porto" in context and "Lisbon" not in context


def test_an_edit_into_a_known_facts_words_merges_the_two_and_is_undone(owner, memories):
    ada = memories["Ada"]
    known = fact(owner, "Ada lives in Lisbon", confidence=0.9)
    client = client_for(owner)

    saved = client.post(
        f"/memory/facts/{ada['fact'].pk}/edit/", {"content": "ada lives in lisbon."}, follow=True
    )

    assert saved.redirect_chain == [(f"/memory/facts/{ada['fact'].pk}/", 302)]
    assert (
        f"已与 #{known.pk} 合并 / Merged into #{known.pk}, the same fact you already had."
        in saved.text
    )
    assert f'<a id="successor" href="/memory/facts/{known.pk}/">' in saved.text
    row = Fact.objects.get(pk=ada["fact"].pk)
    known.refresh_from_db()
    assert (row.status, row.superseded_by_id) == (Fact.Status.SUPERSEDED, known.pk)
    assert (known.status, known.hit_count) == (Fact.Status.ACTIVE, 2)
    # The merged fact now holds the message the edited one was said in.
    assert list(known.sources.values_list("seq", flat=True)) == [1]
    assert events(row)[1:] == [
        (
            "supersede",
            "Ada lives in Porto",
            "ada lives in lisbon.",
            f"user:ada (edit merged into #{known.pk})",
        )
    ]
    assert events(known)[1:] == [
        (
            "reinforce",
            "Ada lives in Lisbon",
            "Ada lives in Lisbon",
            f"user:ada (merged #{row.pk} into it)",
        )
    ]
    listed = client.get("/memory/").text
    assert listed.count("Ada lives in Lisbon") == 1 and "ada lives in lisbon." not in listed

    client.post(f"/memory/facts/{row.pk}/undo/")  # the edited fact back, as it was

    row.refresh_from_db()
    assert (row.content, row.status, row.superseded_by_id) == (
        "Ada lives in Porto",
        Fact.Status.ACTIVE,
        None,
    )


def test_an_empty_or_too_long_edit_is_refused_with_its_reason_and_nothing_changes(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)
    before = events(ada["fact"])
    for content, reason in (
        ("", "a fact needs words"),
        ("  \r\n ", "a fact needs words"),
        ("x" * (FACT_MAX_CHARS + 1), f"a fact is at most {FACT_MAX_CHARS} characters"),
    ):
        refused = client.post(f"/memory/facts/{ada['fact'].pk}/edit/", {"content": content})
        assert refused.status_code == 400
        assert "没有保存 / Not saved: " + reason in refused.text
        assert f">{content}</textarea>" in refused.text  # what was typed is not lost
        row = Fact.objects.get(pk=ada["fact"].pk)
        assert row.content == "Ada lives in Porto"
        assert events(row) == before
    same = client.post(f"/memory/facts/{ada['fact'].pk}/edit/", {"content": "Ada lives in Porto"})
    assert same.status_code == 302 and events(ada["fact"]) == before  # nothing to record


def test_a_forgotten_fact_comes_back_with_undo(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)
    listed = client.get("/memory/?status=evicted").text
    assert f'id="undo-{ada["evicted"].pk}"' in listed
    client.post(f"/memory/facts/{ada['evicted'].pk}/undo/", {"next": "/memory/?status=evicted"})
    assert Fact.objects.get(pk=ada["evicted"].pk).status == Fact.Status.ACTIVE
    # Nothing before its addition: refused, with the reason.
    refused = client.post(f"/memory/facts/{ada['fact'].pk}/undo/", follow=True)
    assert "没有撤销 / Not undone: nothing to undo" in refused.text


def test_a_facts_page_shows_its_whole_history_with_the_versions_it_replaced(owner, memories):
    ada = memories["Ada"]
    newer = fact(owner, "Ada lives in Lisbon now")
    services.fact_supersede(old=ada["fact"], new=newer, actor="consolidator")
    newest = fact(owner, "Ada lives in Madrid now")
    services.fact_supersede(old=newer, new=newest, actor="consolidator")
    client = client_for(owner)

    page = client.get(f"/memory/facts/{newest.pk}/").text

    versions = page[page.index('id="versions"') :]
    assert versions.index("Ada lives in Lisbon now") < versions.index("Ada lives in Porto")
    old_page = client.get(f"/memory/facts/{ada['fact'].pk}/").text
    assert f'href="/memory/facts/{newer.pk}/">#{newer.pk} Ada lives in Lisbon now' in old_page
    assert "被取代 / Superseded" in old_page
    said = ada["session"].messages.get(seq=1)
    assert f'href="/memory/sessions/{ada["session"].pk}/#m{said.seq}">Ada lives in Porto' in (
        old_page
    )  # the message it was said in, quoted


# ---- 新记住的 / New since you last looked ------------------------------------------------------


def test_keep_and_forget_from_the_new_list_then_keep_all(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)
    second = fact(owner, "Ada has a cat named Miso")
    third = fact(owner, "Ada plays the cello")

    def new_ids() -> list[int]:
        return [int(pk) for pk in re.findall(r'id="new-(\d+)"', client.get("/memory/new/").text)]

    assert new_ids() == [third.pk, second.pk, ada["fact"].pk]  # never reviewed: all, newest first
    assert not MemoryReview.objects.exists()  # looking is not reviewing

    kept = client.post(f"/memory/facts/{second.pk}/keep/", {"next": "/memory/new/"})
    assert kept["Location"] == "/memory/new/"
    client.post(f"/memory/facts/{third.pk}/forget/", {"next": "/memory/new/"})

    assert new_ids() == [ada["fact"].pk]
    assert Fact.objects.get(pk=second.pk).status == Fact.Status.ACTIVE
    assert Fact.objects.get(pk=third.pk).status == Fact.Status.EVICTED
    assert events(Fact.objects.get(pk=third.pk))[-1][3] == "user:ada"

    shown_at = re.search(r'name="shown_at" value="([^"]+)"', client.get("/memory/new/").text)[1]
    late = fact(owner, "Ada is learning Portuguese")  # extracted while she was reading
    client.post("/memory/new/keep-all/", {"shown_at": shown_at})

    assert new_ids() == [late.pk]  # not approved unseen
    client.post("/memory/new/keep-all/", {"shown_at": "garbage"})  # now
    assert new_ids() == []
    assert "没有新记住的 / Nothing new" in client.get("/memory/new/").text
    assert MemoryReview.objects.filter(owner=owner).count() == 1  # the mark alone
    again = fact(owner, "Ada runs on Sundays")
    assert new_ids() == [again.pk]


def test_the_new_list_says_since_when(owner, other_owner):
    def since(person) -> str:
        page = client_for(person).get("/memory/new/").text
        return " ".join(re.search(r'<p id="since">(.*?)</p>', page, re.S)[1].split())

    assert since(owner) == (
        "这些是你开始使用以来记住的：保留，或忘记。 These were remembered since you started: "
        "keep them, or forget them. 只是打开这一页不算看过。Only opening this page does not "
        "mark them seen."
    )
    reviewed = timezone.now() - timedelta(days=2)
    services.memory_review_all(owner=owner, until=reviewed)
    when = timezone.localtime(reviewed).strftime("%Y-%m-%d %H:%M")
    assert since(owner) == (
        f"这些是你 {when} 上次看完之后记住的：保留，或忘记。 These were remembered since you "
        f"last reviewed, on {when}: keep them, or forget them. 只是打开这一页不算看过。Only "
        "opening this page does not mark them seen."
    )
    assert "since you started" in since(other_owner)  # her mark is hers alone


# ---- 规则 / Procedures -----------------------------------------------------------------------


def test_a_procedure_switched_off_leaves_the_system_prompt_and_comes_back(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)

    def system() -> str:
        return client.get("/api/context", {"message": "hello"}).json()["system"]

    assert "Call me Ada in every reply" in system()
    client.post(f"/memory/procedures/{ada['procedure'].pk}/switch/", {"active": "off"})
    assert Procedure.objects.get(pk=ada["procedure"].pk).active is False
    assert "Call me Ada in every reply" not in system()
    assert "关闭 / Off" in client.get("/memory/procedures/").text
    client.post(f"/memory/procedures/{ada['procedure'].pk}/switch/", {"active": "on"})
    assert "Call me Ada in every reply" in system()


def test_a_procedure_is_edited_and_a_bad_edit_refused(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)
    url = f"/memory/procedures/{ada['procedure'].pk}/edit/"

    client.post(url, {"rule": "Call me Ada, briefly", "context": "she said so\r\ntwice"})

    row = Procedure.objects.get(pk=ada["procedure"].pk)
    assert (row.rule, row.context) == ("Call me Ada, briefly", "she said so\ntwice")
    too_long = ("y" * (RULE_MAX_CHARS + 1), f"a rule is at most {RULE_MAX_CHARS} characters")
    for rule, reason in (("   ", "a rule needs words"), too_long):
        refused = client.post(url, {"rule": rule, "context": "changed"})
        assert refused.status_code == 400
        assert f"没有保存 / Not saved: {reason}" in refused.text
        row.refresh_from_db()
        assert (row.rule, row.context) == ("Call me Ada, briefly", "she said so\ntwice")


def test_switching_on_past_the_capacity_is_refused(owner, settings):
    settings.ETHAN_PROCEDURE_CAPACITY = 1
    services.procedure_write(owner=owner, rule="Answer in English")
    off, _ = services.procedure_write(owner=owner, rule="Answer in French", active=False)
    refused = client_for(owner).post(
        f"/memory/procedures/{off.pk}/switch/", {"active": "on"}, follow=True
    )
    assert "没有开启 / Not switched on: you have 1 active rules" in refused.text
    assert Procedure.objects.get(pk=off.pk).active is False


def test_deleting_a_procedure_asks_first(owner, memories):
    ada = memories["Ada"]
    client = client_for(owner)
    url = f"/memory/procedures/{ada['procedure'].pk}/delete/"
    asked = client.get(url)
    assert "删除这条规则？" in asked.text and 'id="confirm-delete"' in asked.text
    assert Procedure.objects.filter(pk=ada["procedure"].pk).exists()
    deleted = client.post(url, follow=True)
    assert deleted.redirect_chain == [("/memory/procedures/", 302)]
    assert not Procedure.objects.filter(pk=ada["procedure"].pk).exists()
    other, _ = services.procedure_write(owner=owner, rule="Answer in English")
    assert client.put(f"/memory/procedures/{other.pk}/delete/").status_code == 405
    assert Procedure.objects.filter(pk=other.pk).exists()


# ---- 情节 / Episodes, 会话 / Sessions ----------------------------------------------------------


def test_episodes_are_a_timeline_by_date_that_opens_each_session(owner, make_session):
    older = make_session(owner, "plan the Kyoto trip", "ok", "book hotels", "ok")
    newer = make_session(owner, "the quarterly report", "ok", "due Friday", "ok")
    episode(owner, older, "Planned the Kyoto trip", ["Kyoto", "trip"], days_ago=3)
    episode(owner, newer, "Wrote the quarterly report", ["report"], days_ago=0)
    client = client_for(owner)

    html = client.get("/memory/episodes/").text

    days = re.findall(r'<h2 class="day">([^<]+)</h2>', html)
    assert days == [
        timezone.localtime(timezone.now() - timedelta(days=d)).strftime("%Y-%m-%d") for d in (0, 3)
    ]
    assert html.index("Wrote the quarterly report") < html.index("Planned the Kyoto trip")
    assert f'href="/memory/sessions/{older.pk}/">Planned the Kyoto trip' in html
    assert '<span class="badge">Kyoto</span>' in html
    found = client.get("/memory/episodes/?q=Kyoto").text
    assert "Planned the Kyoto trip" in found and "quarterly" not in found
    opened = client.get(f"/memory/sessions/{older.pk}/").text
    assert 'id="m1"' in opened and "plan the Kyoto trip" in opened and "book hotels" in opened
    assert "Planned the Kyoto trip" in opened  # the episode, on top


def test_sessions_are_listed_searched_and_deleted_after_asking(owner, make_session):
    kyoto = make_session(owner, "plan the Kyoto trip", "ok", "book hotels", "ok")
    report = make_session(owner, "the quarterly report", "ok")
    kept_episode = episode(owner, kyoto, "Planned the Kyoto trip", ["Kyoto"])
    learnt = fact(owner, "Ada is going to Kyoto", session=kyoto, sources=[kyoto.messages.first()])
    client = client_for(owner)

    listed = client.get("/memory/sessions/").text
    assert listed.index(report.pk) < listed.index(kyoto.pk)  # latest activity first
    found = client.get("/memory/sessions/?q=hotels").text
    assert kyoto.pk in found and report.pk not in found and "book hotels" in found

    asked = client.get(f"/memory/sessions/{kyoto.pk}/delete/")
    assert "删除这次会话？" in asked.text and "4 条消息" in asked.text
    assert ChatSession.objects.filter(pk=kyoto.pk).exists()
    deleted = client.post(f"/memory/sessions/{kyoto.pk}/delete/", follow=True)

    assert deleted.redirect_chain == [("/memory/sessions/", 302)]
    assert f"已删除 / Deleted: {kyoto.pk} (4 条消息 / messages)" in deleted.text
    assert not ChatSession.objects.filter(pk=kyoto.pk).exists()
    kept_episode.refresh_from_db()
    assert kept_episode.session_id is None  # the episode stays, without its link
    assert "会话已删除 / The session was deleted" in client.get("/memory/episodes/").text
    assert Fact.objects.get(pk=learnt.pk).status == Fact.Status.ACTIVE


def test_a_source_link_opens_the_page_its_message_is_on(owner, make_session):
    session = make_session(owner, *[f"line {n}" for n in range(MESSAGES_PAGE_SIZE + 5)])
    late = session.messages.get(seq=MESSAGES_PAGE_SIZE + 3)
    row = fact(owner, "Ada said something late", session=session, sources=[late])
    client = client_for(owner)
    link = f"/memory/sessions/{session.pk}/?page=2#m{late.seq}"
    assert f'href="{link}"' in client.get("/memory/").text
    page_two = client.get(link.split("#")[0]).text
    assert f'id="m{late.seq}"' in page_two and 'id="m1"' not in page_two
    assert f'href="/memory/facts/{row.pk}/"' in page_two  # remembered from this conversation


# ---- 我的画像 as a tab, read-only pages ----------------------------------------------------------


def test_the_profile_page_is_a_tab_of_the_same_place(owner):
    client = client_for(owner)
    assert client.get("/memory/profile/")["Location"] == "/profile/"
    profile = client.get("/profile/").text
    assert 'id="tab-profile" href="/profile/" class="current"' in profile
    assert 'id="tab-facts" href="/memory/"' in profile
    facts_tab = client.get("/memory/").text
    assert 'id="tab-facts" href="/memory/" class="current"' in facts_tab
    assert 'id="tab-new" href="/memory/new/"' in facts_tab
    assert 'class="current"' not in facts_tab.split('id="tab-new"')[1].split("</nav>")[0]


def test_looking_changes_nothing(owner, memories):
    client = client_for(owner)
    before = (
        list(FactEvent.objects.values_list("pk", flat=True)),
        list(Fact.objects.values_list("pk", "status", "content", "last_accessed")),
    )
    for url in pages(memories["Ada"]):
        client.get(url)
    after = (
        list(FactEvent.objects.values_list("pk", flat=True)),
        list(Fact.objects.values_list("pk", "status", "content", "last_accessed")),
    )
    assert before == after
    assert not MemoryReview.objects.exists()
    assert client.post("/memory/").status_code == 405


# ---- the services the page added -------------------------------------------------------------


def test_fact_undo_walks_back_through_the_history(owner):
    row = fact(owner, "Ada likes tea", confidence=0.8)
    with pytest.raises(ValidationError, match="nothing to undo"):
        services.fact_undo(fact=row, actor="user:ada")

    services.fact_reinforce(fact=row, confidence=0.9, actor="consolidator")
    reinforced = row.confidence
    services.fact_edit(fact=row, actor="user:ada", content="Ada likes green tea")
    services.fact_set_status(fact=row, status=Fact.Status.EVICTED, actor="user:ada")

    def state():
        row.refresh_from_db()
        return (row.content, round(row.confidence, 4), row.status)

    services.fact_undo(fact=row, actor="user:ada")  # the eviction
    assert state() == ("Ada likes green tea", round(reinforced, 4), Fact.Status.ACTIVE)
    services.fact_undo(fact=row, actor="user:ada")  # the undo: evicted again (a redo)
    assert state() == ("Ada likes green tea", round(reinforced, 4), Fact.Status.EVICTED)
    assert row.events.order_by("-id").first().event == FactEvent.Kind.EVICT
    services.fact_undo(fact=row, actor="user:ada")
    assert state()[2] == Fact.Status.ACTIVE

    superseding = fact(owner, "Ada gave up tea")
    services.fact_supersede(old=row, new=superseding, actor="consolidator")
    services.fact_undo(fact=row, actor="user:ada")
    assert state() == ("Ada likes green tea", round(reinforced, 4), Fact.Status.ACTIVE)
    assert row.superseded_by is None
    # The found-again fact keeps its content key and search words in step.
    assert services.selectors.fact_matching(owner=owner, content="ada likes GREEN tea") == row

    services.fact_edit(fact=row, actor="user:ada", content="Ada likes black tea")
    services.fact_undo(fact=row, actor="user:ada")
    assert state()[0] == "Ada likes green tea"
    assert services.selectors.fact_matching(owner=owner, content="Ada likes black tea") is None


def test_fact_undo_refuses_a_second_active_copy(owner):
    row = fact(owner, "Ada likes tea")
    services.fact_set_status(fact=row, status=Fact.Status.EVICTED, actor="user:ada")
    twin = fact(owner, "Ada likes tea")  # learnt again while the first was forgotten
    assert twin.pk != row.pk
    with pytest.raises(ValidationError, match=f"already remembered \\(#{twin.pk}\\)"):
        services.fact_undo(fact=row, actor="user:ada")
    row.refresh_from_db()
    assert row.status == Fact.Status.EVICTED
    assert row.events.count() == 2


def test_fact_keep_and_memory_review_all(owner, other_owner):
    first = fact(owner, "Ada likes tea")
    assert services.fact_keep(fact=first) == services.fact_keep(fact=first)  # once
    theirs = fact(other_owner, "Grace likes coffee")
    services.fact_keep(fact=theirs)

    early = timezone.now() - timedelta(hours=1)
    mark = services.memory_review_all(owner=owner, until=early)
    assert mark.reviewed_at == early
    assert MemoryReview.objects.filter(owner=owner, fact=first).exists()  # added after the mark
    later = services.memory_review_all(owner=owner)
    assert later.pk == mark.pk and later.reviewed_at > early
    assert services.memory_review_all(owner=owner, until=early).reviewed_at == later.reviewed_at
    future = services.memory_review_all(owner=owner, until=timezone.now() + timedelta(days=9))
    assert future.reviewed_at <= timezone.now()  # never ahead of now
    assert list(MemoryReview.objects.filter(owner=owner).values_list("fact", flat=True)) == [None]
    assert MemoryReview.objects.filter(owner=other_owner, fact=theirs).exists()
