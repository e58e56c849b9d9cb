"""What probing the authorization server as an attacker found, and what MCP hosts the other
tests do not use tripped over (issue 41), over the site served on a loopback port: a client
metadata document that drips its body, unknown document URLs counted per address, /mcp/ and
the proxy's scheme, `iss` on error redirects, a reconnect without `scope`, loopback ports, and
an authorization code used twice."""

from __future__ import annotations

import threading
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.core.cache import cache
from oauth2_provider.cimd import CIMDError
from oauth2_provider.models import AccessToken, Application, RefreshToken
from rest_framework.authtoken.models import Token

from tests.mcp_client import INITIALIZE, over_http
from tests.oauth_app.conftest import pkce
from tests.oauth_app.fetcher import LoopbackMetadataFetcher
from tests.oauth_app.hosts import (
    REDIRECT,
    document_server,
    dripping_server,
    form_of,
    served_site,
)

PASSWORD = "a long enough passphrase"
ACCEPT = {"Accept": "application/json, text/event-stream"}


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
def ca(loopback_ca):
    """The tests' own CA and loopback, which the site may fetch documents from."""
    return loopback_ca


def fetch_timeout(settings, seconds: int) -> None:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": seconds}


def signed_in(site: str, username: str) -> httpx2.Client:
    """The person's browser, signed in on the site's own page (no redirect followed)."""
    http = httpx2.Client(base_url=site, timeout=60)
    page = http.get("/accounts/login/")
    form = form_of(page.text)
    form.fields.update(username=username, password=PASSWORD)
    assert http.post("/accounts/login/", data=form.fields).status_code == 302
    return http


def register(site: str, redirect_uris: list[str], name: str = "Test Host") -> str:
    answer = httpx2.post(
        f"{site}/oauth/register/", json={"client_name": name, "redirect_uris": redirect_uris}
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["client_id"]


def authorize(site: str, client_id: str, challenge: str, **extra: str) -> dict[str, str]:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "state": "s1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": "memory.read memory.write",
        "resource": f"{site}/mcp",
        **extra,
    }
    return {k: v for k, v in params.items() if v is not None}


def answer_consent(http: httpx2.Client, page: httpx2.Response, **choice: str) -> dict:
    """Post the consent form with `choice` (allow, write); the query of the redirect back."""
    assert page.status_code == 200, page.text
    form = form_of(page.text)
    answer = http.post(str(page.url), data={**form.fields, **choice})
    assert answer.status_code == 302, answer.text
    return parse_qs(urlsplit(answer.headers["location"]).query)


def exchange(site: str, client_id: str, code: str, verifier: str) -> httpx2.Response:
    return httpx2.post(
        f"{site}/oauth/token/",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
            "resource": f"{site}/mcp",
        },
    )


# --- client metadata documents ------------------------------------------------------------------


def test_a_dripping_metadata_document_is_given_up_at_the_deadline(ca, settings, db):
    """The deadline bounds the body too: a host sending a byte a second held the fetch (and
    its request thread) for as long as its document lasted."""
    fetch_timeout(settings, 2)
    with (
        dripping_server(ca, length=120) as drip,
        pytest.raises(CIMDError, match="not whole within 2 s"),
    ):
        LoopbackMetadataFetcher().fetch(f"{drip.origin}/host.json")

    assert drip.answered.is_set() and drip.sent < len(drip.body)


# Hosts dripping their metadata a byte a second for the fetch's whole deadline (about 20 s):
# make test-slow.
@pytest.mark.slow
def test_dripping_token_requests_leave_the_sign_in_page_served(site, ca, settings, person):
    """Three token requests naming dripping documents: one is fetched at a time, the others
    are answered at once as unknown clients, and the sign-in page is served meanwhile."""
    fetch_timeout(settings, 10)
    answers: list[httpx2.Response] = []
    with dripping_server(ca, length=120) as drip:

        def ask(number: int) -> None:
            answers.append(
                httpx2.post(
                    f"{site}/oauth/token/",
                    data={
                        "grant_type": "authorization_code",
                        "code": "x",
                        "redirect_uri": REDIRECT,
                        "client_id": f"{drip.origin}/drip-{number}.json",
                        "code_verifier": "v" * 43,
                    },
                    timeout=60,
                )
            )

        askers = [threading.Thread(target=ask, args=(n,)) for n in range(3)]
        for asker in askers:
            asker.start()
        try:
            assert drip.answered.wait(30), "no document was fetched"
            sign_in = httpx2.get(f"{site}/accounts/login/", timeout=30)
            still_dripping = drip.dripping
        finally:
            for asker in askers:
                asker.join(60)

    assert sign_in.status_code == 200 and still_dripping >= 1
    assert [a.json()["error"] for a in answers] == ["invalid_client"] * 3
    assert not Application.objects.exists()


def test_unknown_metadata_urls_are_counted_per_address(site, ca, settings, transactional_db):
    """Each URL Ethan does not know yet counts as a registration from the address asking
    (ETHAN_OAUTH_REGISTER_RATE, shared with RFC 7591 registrations): 40 made-up URLs made 40
    fetches and 40 Application rows."""
    settings.ETHAN_OAUTH_REGISTER_RATE = "3/hour"
    cache.clear()
    with document_server(ca) as documents:
        client_ids = [
            documents.publish(
                f"/host-{n}.json",
                client_name=f"Host {n}",
                redirect_uris=[REDIRECT],
                token_endpoint_auth_method="none",
            )
            for n in range(5)
        ]
        for client_id in client_ids:
            httpx2.post(
                f"{site}/oauth/token/",
                data={"grant_type": "refresh_token", "refresh_token": "x", "client_id": client_id},
            )
        known_again = httpx2.post(
            f"{site}/oauth/token/",
            data={"grant_type": "refresh_token", "refresh_token": "x", "client_id": client_ids[0]},
        )

    assert Application.objects.count() == 3
    assert sum(documents.fetches.values()) == 3
    # A client already known is not counted again (its document is cached).
    assert known_again.json()["error"] == "invalid_grant"


# --- /mcp behind a proxy ------------------------------------------------------------------------


def test_mcp_with_a_trailing_slash_is_served_as_mcp(site, person):
    """POST /mcp/ answered a 307 to http://…/mcp, which the TypeScript SDK refuses to follow."""
    token = Token.objects.create(user=person).key
    headers = {**ACCEPT, "Authorization": f"Bearer {token}"}

    raw = httpx2.post(f"{site}/mcp/", json=INITIALIZE, headers=headers)

    async def tools(client):
        return [tool.name for tool in (await client.list_tools()).tools]

    assert raw.status_code == 200, (raw.status_code, raw.headers)
    assert "memory_write" in over_http(f"{site}/mcp/", token, tools)


def test_behind_a_trusted_proxy_every_url_is_https(site, settings, transactional_db):
    """With ETHAN_NUM_PROXIES set, X-Forwarded-Proto is the scheme: the MCP 401's metadata URL
    and the authorization server's issuer and endpoints are https, as the person reached them."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    host = urlsplit(site).netloc

    challenge = httpx2.post(f"{site}/mcp", json=INITIALIZE, headers={**ACCEPT, **forwarded})
    metadata = httpx2.get(f"{site}/.well-known/oauth-authorization-server", headers=forwarded)

    assert challenge.status_code == 401
    assert f'resource_metadata="https://{host}/' in challenge.headers["www-authenticate"]
    assert metadata.json()["issuer"] == f"https://{host}"
    assert metadata.json()["token_endpoint"].startswith(f"https://{host}/")
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 0}
    untrusted = httpx2.get(f"{site}/.well-known/oauth-authorization-server", headers=forwarded)
    assert untrusted.json()["issuer"] == f"http://{host}"  # no proxy said to be there


# --- the authorization endpoint -----------------------------------------------------------------


def test_error_redirects_name_the_issuer(site, person):
    """RFC 9207: a denial and a PKCE error come back with `iss`, as a granted code does."""
    client_id = register(site, [REDIRECT])
    http = signed_in(site, person.username)
    _, challenge = pkce()

    page = http.get("/oauth/authorize/", params=authorize(site, client_id, challenge))
    denied = answer_consent(http, page)  # Deny: no "allow"
    no_pkce = http.get(
        "/oauth/authorize/", params=authorize(site, client_id, None, code_challenge_method=None)
    )
    pkce_error = parse_qs(urlsplit(no_pkce.headers["location"]).query)

    assert denied["error"] == ["access_denied"] and denied["iss"] == [site]
    assert pkce_error["error"] == ["invalid_request"] and pkce_error["iss"] == [site]


def test_a_reconnect_without_scope_lets_the_person_choose_writing(site, person):
    """A host that sends no `scope` is offered what the metadata lists, as on a first
    connection: it got a read-only token with no choice, and every write tool then a 403."""
    client_id = register(site, [REDIRECT])
    http = signed_in(site, person.username)
    verifier, challenge = pkce()

    page = http.get("/oauth/authorize/", params=authorize(site, client_id, challenge, scope=None))
    assert 'name="write"' in page.text
    back = answer_consent(http, page, allow="on", write="on")
    tokens = exchange(site, client_id, back["code"][0], verifier).json()

    assert tokens["scope"] == "memory.read memory.write"


def test_a_loopback_redirect_takes_any_port_and_the_page_names_it(site, person):
    """RFC 8252 §7.3: http://127.0.0.1 with any port (a desktop host's ephemeral one), and the
    consent page names the port the code goes to; http://localhost matches port included."""
    client_id = register(site, ["http://127.0.0.1:3000/cb"])
    localhost_id = register(site, ["http://localhost:3000/cb"])
    http = signed_in(site, person.username)
    _, challenge = pkce()

    page = http.get(
        "/oauth/authorize/",
        params=authorize(site, client_id, challenge, redirect_uri="http://127.0.0.1:4000/cb"),
    )
    assert 'id="destination">127.0.0.1:4000<' in page.text
    back = http.post(str(page.url), data={**form_of(page.text).fields, "allow": "on"})
    elsewhere = http.get(
        "/oauth/authorize/",
        params=authorize(site, localhost_id, challenge, redirect_uri="http://localhost:4000/cb"),
    )

    assert back.headers["location"].startswith("http://127.0.0.1:4000/cb?code=")
    assert elsewhere.status_code == 400 and "location" not in elsewhere.headers


def test_a_code_used_twice_revokes_the_tokens_it_gave(site, person):
    """RFC 6749 §4.1.2: the code leaked; what its first exchange gave no longer works."""
    client_id = register(site, [REDIRECT])
    http = signed_in(site, person.username)
    verifier, challenge = pkce()
    page = http.get("/oauth/authorize/", params=authorize(site, client_id, challenge))
    code = answer_consent(http, page, allow="on", write="on")["code"][0]

    first = exchange(site, client_id, code, verifier).json()
    again = exchange(site, client_id, code, verifier)
    headers = {**ACCEPT, "Authorization": f"Bearer {first['access_token']}"}
    with_the_token = httpx2.post(f"{site}/mcp", json=INITIALIZE, headers=headers)

    assert again.json()["error"] == "invalid_grant"
    assert with_the_token.status_code == 401
    assert not AccessToken.objects.filter(user=person).exists()
    assert not RefreshToken.objects.filter(revoked__isnull=True).exists()


def test_the_consent_page_names_where_the_code_goes_not_the_first_redirect(site, person):
    """A client registered as "Claude" with claude.ai's callback and its own, asking with its
    own: the page showed "Claude (says it is claude.ai)"."""
    client_id = register(
        site,
        ["https://claude.ai/api/mcp/auth_callback", "https://evil.example/cb"],
        name="Claude\u202e\n\nVerified by Ethan",
    )
    http = signed_in(site, person.username)
    _, challenge = pkce()

    page = http.get(
        "/oauth/authorize/",
        params=authorize(site, client_id, challenge, redirect_uri="https://evil.example/cb"),
    ).text

    assert 'id="destination">evil.example<' in page
    assert "claude.ai" not in page.split('id="impersonation-warning"')[0]
    assert 'id="client-name">Claude Verified by Ethan<' in page
    assert 'id="impersonation-warning"' in page


def test_facts_written_are_counted_by_client_id_not_by_name(site, person):
    """Two clients named "Claude" (two hosts: their redirect URIs differ), one may write and
    writes over MCP, one reads only: the Connected apps tab showed "1 fact" for both."""
    http = signed_in(site, person.username)
    tokens = {}
    for label, uri, choice in (
        ("writer", REDIRECT, {"write": "on"}),
        ("reader", "http://127.0.0.1:33418/other", {}),
    ):
        client_id = register(site, [uri], name="Claude")
        verifier, challenge = pkce()
        page = http.get(
            "/oauth/authorize/", params=authorize(site, client_id, challenge, redirect_uri=uri)
        )
        code = answer_consent(http, page, allow="on", **choice)["code"][0]
        answer = httpx2.post(
            f"{site}/oauth/token/",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": uri,
                "client_id": client_id,
                "code_verifier": verifier,
                "resource": f"{site}/mcp",
            },
        )
        tokens[label] = (client_id, answer.json()["access_token"])

    async def remember(client):
        return await client.call_tool("memory_write", {"content": "用户住在杭州"})

    over_http(f"{site}/mcp", tokens["writer"][1], remember)
    page = http.get("/memory/apps/").text

    writer = Application.objects.get(client_id=tokens["writer"][0]).connections.get()
    reader = Application.objects.get(client_id=tokens["reader"][0]).connections.get()
    assert (writer.facts_written, reader.facts_written) == (1, 0)
    assert f'id="app-{writer.pk}-facts"' in page and f'id="app-{reader.pk}-facts"' in page
    assert page.count("1 条记忆 / fact<") == 1 and page.count("0 条记忆 / facts<") == 1
