"""The whole flow as a host runs it, with the mcp SDK's own OAuth client (OAuthClientProvider)
against the site served on a loopback port: the 401, discovery, the client identified by a
client metadata document (served on loopback https) or by dynamic registration, sign-in and
consent in the browser, PKCE, the token exchange, tool calls, a refresh, and Disconnect."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation
from oauth2_provider.models import AccessToken, Application, RefreshToken

from ethan_site import settings as production
from memory_app.models import Fact
from oauth_app.models import Connection
from oauth_app.services import connection_end
from tests.mcp_client import structured
from tests.oauth_app.hosts import (
    REDIRECT,
    AuthorizationRefused,
    Browser,
    MemoryStorage,
    document_server,
    provider_for,
    served_site,
)

PASSWORD = "a long enough passphrase"


@pytest.fixture
def person(transactional_db, owner):
    owner.set_password(PASSWORD)
    owner.save()
    return owner


@pytest.fixture
def site(transactional_db, person):
    """The whole site served, on the test's database from before it starts until after it has
    stopped: its periodic work's thread must not outlive the database's access."""
    with served_site() as origin:
        yield origin


@pytest.fixture
def documents(loopback_ca):
    """A loopback https server for client metadata documents, which the site may fetch (the
    tests' own CA and loopback, opened to the tests' fetcher only)."""
    with document_server(loopback_ca) as served:
        yield served


def connect(mcp_url, provider, use):
    async def session():
        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            transport = streamable_http_client(mcp_url, http_client=http)
            info = Implementation(name="sdk-host", version="1.0")
            async with Client(transport, client_info=info) as client:
                return await use(client)

    return anyio.run(session)


async def write_and_read(client):
    written = await client.call_tool("memory_write", {"content": "用户住在杭州"})
    listed = await client.call_tool("facts_list", {})
    return structured(written), structured(listed)


def test_a_host_with_a_client_metadata_document_connects_by_url(site, documents, person):
    client_id = documents.publish(
        "/claude.json",
        client_name="Claude",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    browser, storage = Browser(person.username, PASSWORD), MemoryStorage()
    provider = provider_for(f"{site}/mcp", browser, storage, cimd=client_id)

    written, listed = connect(f"{site}/mcp", provider, write_and_read)

    assert written["fact"]["source_client"] == "Claude"
    assert [fact["content"] for fact in listed["facts"]] == ["用户住在杭州"]
    assert storage.client_info.client_id == client_id  # no registration: the URL is the id
    application = Application.objects.get(client_id=client_id)
    assert (application.name, application.registration_source) == ("Claude", "cimd")
    assert documents.fetches == {"/claude.json": 1}
    [page] = browser.consent_pages
    assert 'id="client-name">Claude<' in page
    assert "published at 127.0.0.1" in page  # the document's own domain
    assert storage.tokens.scope == "memory.read memory.write"
    assert AccessToken.objects.get(user=person).resource == [f"{site}/mcp"]


def test_a_host_without_one_registers_then_refreshes_then_is_disconnected(site, person, settings):
    # Access tokens that end within the test, so the host's own clock makes it refresh.
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "ACCESS_TOKEN_EXPIRE_SECONDS": 2,
        "ALWAYS_RELOAD_OAUTHLIB_CORE": True,  # DOT keeps its server (and token life) otherwise
    }
    browser, storage = Browser(person.username, PASSWORD), MemoryStorage()
    provider = provider_for(f"{site}/mcp", browser, storage, name="Old Host")

    async def use_refresh_use(client):
        first = structured(await client.call_tool("memory_write", {"content": "用户养了一只猫"}))
        issued = storage.tokens.refresh_token
        await anyio.sleep(2.5)
        second = structured(await client.call_tool("facts_list", {}))
        return first, issued, second

    first, issued, second = connect(f"{site}/mcp", provider, use_refresh_use)

    assert first["fact"]["source_client"] == "Old Host"
    assert [fact["content"] for fact in second["facts"]] == ["用户养了一只猫"]
    assert storage.client_info.client_id != "" and not storage.client_info.client_id.startswith(
        "https://"
    )  # registered (RFC 7591)
    assert storage.tokens.refresh_token != issued  # rotated
    family = RefreshToken.objects.filter(user=person)
    assert family.count() == 2 and family.filter(revoked__isnull=True).count() == 1
    assert len(browser.consent_pages) == 1  # the refresh asked the person nothing

    # Disconnect (the memory page's button calls the same service): the next request is a 401,
    # and the host's refresh token is dead too.
    connection_end(connection=Connection.objects.get(owner=person))
    answer = httpx2.post(
        f"{site}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={
            "Authorization": f"Bearer {storage.tokens.access_token}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert answer.status_code == 401
    assert 'resource_metadata="' in answer.headers["www-authenticate"]
    assert not RefreshToken.objects.filter(user=person, revoked__isnull=True).exists()
    assert Fact.objects.get(owner=person).source_client == "Old Host"  # what it wrote stays


def test_a_read_only_connection_is_refused_writing(site, person):
    browser = Browser(person.username, PASSWORD, write=False)
    storage = MemoryStorage()
    provider = provider_for(f"{site}/mcp", browser, storage)

    async def read_then_write(client):
        listed = structured(await client.call_tool("facts_list", {}))
        try:
            await client.call_tool("memory_write", {"content": "用户喜欢咖啡"})
        except Exception as refused:  # the 403, after the host asked the person again
            return listed, refused
        return listed, None

    listed, refused = connect(f"{site}/mcp", provider, read_then_write)

    assert listed == {"facts": []}
    assert refused is not None
    assert storage.tokens.scope == "memory.read"
    # The host stepped up (SEP-2350) and asked the person again; they granted reading again.
    assert len(browser.consent_pages) == 2
    assert not Fact.objects.exists()


def test_a_metadata_document_on_a_private_address_is_never_fetched(
    site, person, loopback_ca, settings
):
    # Production's fetcher, as production's settings name it, though the tests opened loopback.
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "CIMD_METADATA_FETCHER": production.OAUTH2_PROVIDER["CIMD_METADATA_FETCHER"],
    }
    with document_server(loopback_ca) as documents:
        client_id = documents.publish(
            "/evil.json",
            client_name="Evil",
            redirect_uris=[REDIRECT],
            token_endpoint_auth_method="none",
        )
        browser, storage = Browser(person.username, PASSWORD), MemoryStorage()
        provider = provider_for(f"{site}/mcp", browser, storage, cimd=client_id)

        with pytest.raises(ExceptionGroup) as failed:
            connect(f"{site}/mcp", provider, write_and_read)

    [refused] = failed.value.subgroup(AuthorizationRefused).exceptions
    assert refused.status == 400 and "Invalid client_id parameter value." in refused.page

    assert documents.fetches == {}
    assert not Application.objects.filter(client_id=client_id).exists()
    assert not Connection.objects.exists()
