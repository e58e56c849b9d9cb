"""/mcp as an OAuth protected resource, served on a loopback port: the 401 challenge, tokens
bound to it (and refused elsewhere), scopes per tool, the client's name on what it writes, and
disconnection taking effect at the next request."""

from __future__ import annotations

import httpx2
import pytest

from memory_app.models import Fact
from oauth_app import scopes
from oauth_app.models import Connection
from oauth_app.services import connection_end
from tests.mcp_client import INITIALIZE, error_text, over_http, served_in_thread, structured
from tests.oauth_app.conftest import host_at

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
WRITE_CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "memory_write", "arguments": {"content": "用户喜欢爬山"}},
}


@pytest.fixture
def mcp_url(transactional_db):
    with served_in_thread() as url:
        yield url


def origin_of(url: str) -> str:
    return url.removesuffix("/mcp")


def post(url: str, message: dict, token: str | None = None) -> httpx2.Response:
    headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx2.post(url, json=message, headers=headers, timeout=30)


async def write_fact(client):
    return await client.call_tool("memory_write", {"content": "用户喜欢爬山"})


def test_a_request_without_a_token_is_told_where_to_authorize(mcp_url):
    answer = post(mcp_url, INITIALIZE)

    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{origin_of(mcp_url)}/.well-known/oauth-protected-resource'
        '/mcp", scope="memory.read memory.write"'
    )
    assert answer.json()["error"] == "invalid_token"


def test_an_unknown_token_gets_the_challenge_with_its_error(mcp_url):
    answer = post(mcp_url, INITIALIZE, token="not-a-token")

    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="')
    assert 'scope="memory.read memory.write"' in challenge and "resource_metadata=" in challenge


def test_an_oauth_token_reads_and_writes_as_its_client(mcp_url, client, owner):
    host = host_at(client, owner, origin_of(mcp_url), client_name="Claude")
    token = host.tokens()["access_token"]

    written = structured(over_http(mcp_url, token, write_fact, client_name="claude-ai"))

    assert written["fact"]["source_client"] == "Claude"  # the registered name, not clientInfo
    fact = Fact.objects.get(owner=owner)
    assert (fact.source, fact.source_client) == ("mcp", "Claude")
    assert Connection.objects.get(owner=owner).last_used_at is not None


def test_a_read_only_token_cannot_write(mcp_url, client, owner, monkeypatch):
    host = host_at(client, owner, origin_of(mcp_url))
    token = host.tokens(write=False)["access_token"]

    async def read_then_write(client):
        listed = await client.call_tool("facts_list", {})
        return listed, await write_fact(client)

    refused = post(mcp_url, WRITE_CALL, token=token)
    # The tool itself refuses too, whichever way the call reaches it.
    monkeypatch.setattr(scopes, "WRITE_TOOLS", frozenset())
    listed, written = over_http(mcp_url, token, read_then_write)

    assert refused.status_code == 403
    assert refused.json()["error"] == "insufficient_scope"
    assert refused.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="memory_write changes the '
        'memory: it needs memory.write", resource_metadata="'
        f'{origin_of(mcp_url)}/.well-known/oauth-protected-resource/mcp", scope="memory.write"'
    )
    assert structured(listed) == {"facts": []}
    assert "the person did not grant memory.write" in error_text(written)
    assert not Fact.objects.exists()


def test_a_token_for_another_resource_is_refused(mcp_url, client, owner):
    elsewhere = host_at(client, owner, "http://testserver").tokens()["access_token"]
    # The same server under another name is another resource: localhost is not 127.0.0.1.
    other_name = mcp_url.replace("127.0.0.1", "localhost")

    answers = [
        post(mcp_url, INITIALIZE, token=elsewhere),
        post(other_name, INITIALIZE, token=elsewhere),
    ]

    assert [a.status_code for a in answers] == [401, 401]


def test_disconnecting_revokes_the_tokens_at_once(mcp_url, client, owner):
    host = host_at(client, owner, origin_of(mcp_url))
    tokens = host.tokens()
    assert post(mcp_url, INITIALIZE, token=tokens["access_token"]).status_code == 200

    connection_end(connection=Connection.objects.get(owner=owner))

    assert post(mcp_url, INITIALIZE, token=tokens["access_token"]).status_code == 401
    assert host.refresh(tokens["refresh_token"]).status_code == 400


def test_an_expired_token_is_refused(mcp_url, client, owner):
    from django.utils import timezone
    from oauth2_provider.models import AccessToken

    token = host_at(client, owner, origin_of(mcp_url)).tokens()["access_token"]
    AccessToken.objects.filter(user=owner).update(expires=timezone.now())

    assert post(mcp_url, INITIALIZE, token=token).status_code == 401


def test_oauth_sessions_count_toward_the_persons_cap(
    transactional_db, client, owner, settings, monkeypatch
):
    from rest_framework.authtoken.models import Token

    from channels_app.mcp_server.http import PersonalSessions
    from tests.mcp_client import INITIALIZED

    adopted = []
    adopt = PersonalSessions.adopt
    monkeypatch.setattr(
        PersonalSessions, "adopt", lambda manager: adopted.append(adopt(manager)) or adopted[-1]
    )
    settings.ETHAN_MCP_SESSIONS_PER_PERSON = 1
    with served_in_thread() as url:
        host = host_at(client, owner, origin_of(url))
        oauth_token = host.tokens()["access_token"]
        api_token = Token.objects.create(user=owner).key
        [manager] = adopted
        first = post(url, INITIALIZE, token=api_token)
        session = first.headers["mcp-session-id"]
        headers = {**ACCEPT, "Authorization": f"Bearer {api_token}", "Mcp-Session-Id": session}
        assert httpx2.post(url, json=INITIALIZED, headers=headers, timeout=30).status_code == 202

        second = post(url, INITIALIZE, token=oauth_token)  # the same person, by OAuth

        assert second.status_code == 200
        # One person, one session at most: the idle one opened by API token made room.
        assert list(manager.sessions_of(str(owner.pk))) == [second.headers["mcp-session-id"]]


def test_behind_the_https_proxy_tokens_name_the_https_origin(mcp_url, client, owner, settings):
    settings.ETHAN_HTTPS = True  # the proxy terminates TLS and says so in X-Forwarded-Proto
    https_origin = origin_of(mcp_url).replace("http://", "https://")
    host = host_at(client, owner, https_origin)
    host.client.defaults["HTTP_X_FORWARDED_PROTO"] = "https"
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    token = host.tokens()["access_token"]
    proxied = {**ACCEPT, "Authorization": f"Bearer {token}", "X-Forwarded-Proto": "https"}

    through_proxy = httpx2.post(mcp_url, json=INITIALIZE, headers=proxied, timeout=30)
    no_token = {**ACCEPT, "X-Forwarded-Proto": "https"}
    challenged = httpx2.post(mcp_url, json=INITIALIZE, headers=no_token, timeout=30)
    bypassing = post(mcp_url, INITIALIZE, token=token)  # plain http, not through the proxy

    assert through_proxy.status_code == 200
    assert (
        f'resource_metadata="{https_origin}/.well-known' in challenged.headers["www-authenticate"]
    )
    assert bypassing.status_code == 401  # http://… is another resource
