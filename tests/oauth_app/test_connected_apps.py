"""The memory page's Connected apps tab: each app the person connected, when, last used, what
it may do and what it wrote (a link to those facts), and Disconnect; another person's
connections are never shown nor ended."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken

from memory_app import services as memory_services
from memory_app.models import Fact
from oauth_app import services as oauth_services
from oauth_app.models import Connection
from tests.oauth_app.conftest import Host, register


def connected(client, person, name: str, *, write: bool = True) -> Connection:
    client.force_login(person)
    host = Host(client=client, client_id=register(client, client_name=name)["client_id"])
    host.tokens(write=write)
    return Connection.objects.get(owner=person, application__client_id=host.client_id)


def written_by(person, client_name: str, content: str) -> Fact:
    return memory_services.fact_write(
        owner=person,
        content=content,
        category="knowledge",
        confidence=0.95,
        source=Fact.Source.MCP,
        source_client=client_name,
    )


def test_the_tab_lists_each_app_with_what_it_wrote(
    client, owner, other_owner, django_assert_num_queries
):
    claude = connected(client, owner, "Claude")
    connected(client, owner, "ChatGPT", write=False)
    Connection.objects.filter(pk=claude.pk).update(last_used_at=timezone.now() - timedelta(hours=1))
    written_by(owner, "Claude", "用户住在杭州")
    written_by(owner, "Claude", "用户养了一只猫")
    for _ in range(2):  # what the MCP door does as Claude's memory_write stores them
        oauth_services.connection_wrote(owner_id=owner.pk, application_id=claude.application_id)
    written_by(owner, "ChatGPT", "不是它写的")  # another client of that name: not counted
    connected(client, other_owner, "Grace's app")
    client.force_login(owner)

    with django_assert_num_queries(3):  # session, user, connections with their counts
        page = client.get("/memory/apps/")

    text = page.content.decode()
    rows = page.context["apps"]
    assert [(row.name, row.connection.scopes, row.written) for row in rows] == [
        ("ChatGPT", ["memory.read"], 0),
        ("Claude", ["memory.read", "memory.write"], 2),
    ]
    assert [row.used_text != "" for row in rows] == [False, True]  # ChatGPT never called
    assert [row.connection.signed_in for row in rows] == [True, True]
    assert "Signed out" not in text
    assert "Grace" not in text
    assert "says it is 127.0.0.1" in text  # registered: its domain is its own claim
    claude_facts = client.get(rows[1].facts_url)
    assert sorted(f.content for f in claude_facts.context["page_obj"].object_list) == [
        "用户住在杭州",
        "用户养了一只猫",
    ]
    assert "What Claude wrote" in claude_facts.content.decode()


def test_disconnect_revokes_at_once_and_only_the_persons_own(client, owner, other_owner):
    claude = connected(client, owner, "Claude")
    grace = connected(client, other_owner, "Grace's app")
    client.force_login(owner)

    refused = client.post(f"/memory/apps/{grace.pk}/disconnect/")
    answer = client.post(f"/memory/apps/{claude.pk}/disconnect/", follow=True)

    assert refused.status_code == 404
    assert Connection.objects.filter(pk=grace.pk).exists()
    assert answer.redirect_chain == [("/memory/apps/", 302)]
    assert "Claude is disconnected" in answer.content.decode()
    assert not Connection.objects.filter(owner=owner).exists()
    assert not AccessToken.objects.filter(user=owner).exists()
    assert not RefreshToken.objects.filter(user=owner, revoked__isnull=True).exists()
    assert AccessToken.objects.filter(user=other_owner).exists()
    assert client.get(f"/memory/apps/{claude.pk}/disconnect/").status_code == 405


def test_an_app_whose_tokens_lapsed_or_were_revoked_shows_signed_out(client, owner):
    from oauth2_provider.models import AccessToken, RefreshToken

    claude = connected(client, owner, "Claude")
    AccessToken.objects.filter(user=owner).update(expires=timezone.now() - timedelta(seconds=1))
    still = client.get("/memory/apps/")  # the refresh token still works
    RefreshToken.objects.filter(user=owner).update(revoked=timezone.now())  # e.g. RFC 7009

    page = client.get("/memory/apps/")

    assert [row.connection.signed_in for row in still.context["apps"]] == [True]
    assert [row.connection.signed_in for row in page.context["apps"]] == [False]
    assert f'id="app-{claude.pk}-signed-out"' in page.content.decode()


def test_expired_tokens_are_cleared_by_the_daily_task(db, django_user_model):
    from oauth_app.tasks import oauth_clear_expired_task

    owner = django_user_model.objects.create_user("zed")
    past, future = timezone.now() - timedelta(days=2), timezone.now() + timedelta(hours=1)
    AccessToken.objects.create(user=owner, token="old", expires=past, scope="memory.read")
    AccessToken.objects.create(user=owner, token="new", expires=future, scope="memory.read")
    oauth_clear_expired_task.run()
    assert list(AccessToken.objects.values_list("token", flat=True)) == ["new"]


def test_a_host_that_registered_again_is_one_app_with_its_connections(client, owner, settings):
    """Claude and ChatGPT register again on invalid_client: three registrations of one host
    (the same name and redirect URIs) are one row and one app under the cap, and Disconnect
    ends all three."""
    settings.ETHAN_OAUTH_CLIENTS_PER_PERSON = 2
    first = connected(client, owner, "Claude")
    connected(client, owner, "Claude")
    latest = connected(client, owner, "Claude")
    other = connected(client, owner, "ChatGPT")  # a second app: within the cap of 2

    page = client.get("/memory/apps/")
    rows = page.context["apps"]

    assert [(row.name, len(row.connections)) for row in rows] == [("ChatGPT", 1), ("Claude", 3)]
    assert rows[1].connection == latest
    assert "2 / 最多 2" in page.content.decode()
    assert f'id="app-{latest.pk}-connections"' in page.content.decode()
    client.post(f"/memory/apps/{first.pk}/disconnect/")
    assert list(Connection.objects.filter(owner=owner)) == [other]
    assert not AccessToken.objects.filter(user=owner).exclude(application=other.application)
