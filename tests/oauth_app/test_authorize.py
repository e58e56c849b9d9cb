"""Authorization code with PKCE, bound to /mcp, through Django's test client: consent (read
and write, or read only), the token exchange, refresh rotation, and every refusal."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from oauth2_provider.models import AccessToken, RefreshToken

from oauth_app.models import Connection
from tests.oauth_app.conftest import ORIGIN, RESOURCE, Host, pkce, register


def test_consent_then_code_then_tokens_bound_to_mcp(host, owner):
    tokens = host.tokens()

    assert set(tokens) == {"access_token", "refresh_token", "expires_in", "token_type", "scope"}
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 3600
    assert tokens["scope"] == "memory.read memory.write"
    [access] = AccessToken.objects.filter(user=owner)
    assert access.resource == [RESOURCE] and access.token == ""  # stored hashed
    [connection] = Connection.objects.filter(owner=owner)
    assert connection.scope == "memory.read memory.write" and connection.last_used_at is None
    assert connection.application.name == "Test Host"


def test_the_person_may_grant_reading_only(host, owner):
    tokens = host.tokens(write=False)

    assert tokens["scope"] == "memory.read"
    assert Connection.objects.get(owner=owner).scope == "memory.read"


def test_the_consent_page_names_the_client_and_what_it_may_do(host):
    _, challenge = pkce()
    page = host.client.get("/oauth/authorize/", host.authorize_params(challenge))

    text = page.content.decode()
    assert 'id="client-name">Test Host<' in text
    assert "Read your memory" in text and "Write to your memory" in text
    assert 'name="write"' in text
    # Where the code goes (with its port, on loopback, where any port is accepted), and a
    # warning for the loopback interface (MCP security considerations: "Localhost Redirect
    # URI Risks").
    assert 'id="destination">127.0.0.1:33418<' in text
    assert 'id="loopback-warning"' in text


def test_signing_in_comes_first(client, owner):
    client_id = register(client)["client_id"]
    _, challenge = pkce()
    from tests.oauth_app.conftest import Host

    answer = client.get("/oauth/authorize/", Host(client, client_id).authorize_params(challenge))

    assert answer.status_code == 302
    assert answer["Location"].startswith("/accounts/login/?next=/oauth/authorize/")


def test_a_redirect_uri_not_registered_is_refused_without_a_redirect(host):
    _, challenge = pkce()
    params = host.authorize_params(challenge, redirect_uri="http://127.0.0.1:33418/elsewhere")

    answer = host.client.get("/oauth/authorize/", params)

    assert answer.status_code == 400 and not answer.has_header("Location")
    assert "<strong>invalid_request</strong>: Mismatching redirect URI." in answer.content.decode()


def test_an_authorization_request_without_pkce_is_refused(host):
    params = host.authorize_params("x")
    del params["code_challenge"], params["code_challenge_method"]

    answer = host.client.get("/oauth/authorize/", params)

    assert answer.status_code == 302
    query = parse_qs(urlsplit(answer["Location"]).query)
    assert query["error"] == ["invalid_request"]
    assert "challenge" in query["error_description"][0].lower()


def test_plain_pkce_is_refused(host):
    verifier, _ = pkce()
    answer = host.consent(verifier, code_challenge_method="plain")

    query = parse_qs(urlsplit(answer["Location"]).query)
    assert query["error"] == ["invalid_request"], query


def test_a_missing_or_wrong_verifier_is_refused(host):
    _, challenge = pkce()
    code = host.code(challenge)
    other, _ = pkce()

    wrong = host.token(code, other)
    missing = host.client.post(
        "/oauth/token/",
        {
            "grant_type": "authorization_code",
            "code": host.code(challenge),
            "redirect_uri": host.redirect_uri,
            "client_id": host.client_id,
            "resource": RESOURCE,
        },
    )

    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_grant")
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    assert not AccessToken.objects.filter(user__isnull=False).exists()


def test_a_code_used_twice_revokes_what_it_gave(host):
    """RFC 6749 §4.1.2: the second exchange is refused, and the tokens of the first, the
    refresh tokens rotated from them too, are revoked (it leaked)."""
    verifier, challenge = pkce()
    code = host.code(challenge)
    first = host.token(code, verifier).json()
    rotated = host.refresh(first["refresh_token"]).json()

    again = host.token(code, verifier)

    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
    assert not AccessToken.objects.filter(user__isnull=False).exists()
    assert not RefreshToken.objects.filter(revoked__isnull=True).exists()
    assert host.refresh(rotated["refresh_token"]).json()["error"] == "invalid_grant"


def test_a_token_for_another_resource_is_refused(host):
    _, challenge = pkce()
    elsewhere = host.client.get(
        "/oauth/authorize/",
        host.authorize_params(challenge, resource="https://elsewhere.example/mcp"),
    )
    verifier, challenge = pkce()
    widened = host.token(host.code(challenge), verifier, resource="https://elsewhere.example/mcp")

    assert elsewhere.status_code == 400 and b"invalid_target" in elsewhere.content
    assert (widened.status_code, widened.json()["error"]) == (400, "invalid_target")


def test_no_resource_still_binds_the_token_to_mcp(host, owner):
    verifier, challenge = pkce()
    params = host.authorize_params(challenge)
    del params["resource"]
    page = host.client.get("/oauth/authorize/", params)
    form = page.context["form"]
    consented = host.client.post(
        "/oauth/authorize/", {**{n: form[n].value() or "" for n in form.fields}, "allow": "on"}
    )
    code = parse_qs(urlsplit(consented["Location"]).query)["code"][0]
    answer = host.client.post(
        "/oauth/token/",
        {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": host.redirect_uri,
            "client_id": host.client_id,
            "code_verifier": verifier,
        },
    )

    assert answer.status_code == 200, answer.content
    assert AccessToken.objects.get(user=owner).resource == [RESOURCE]


def test_refresh_tokens_rotate_and_a_reused_one_revokes_the_family(host, owner):
    first = host.tokens()
    second = host.refresh(first["refresh_token"])
    assert second.status_code == 200, second.content
    second = second.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert second["scope"] == "memory.read memory.write"

    replayed = host.refresh(first["refresh_token"])
    after = host.refresh(second["refresh_token"])

    assert (replayed.status_code, replayed.json()["error"]) == (400, "invalid_grant")
    assert (after.status_code, after.json()["error"]) == (400, "invalid_grant")
    assert not RefreshToken.objects.filter(user=owner, revoked__isnull=True).exists()


def test_a_person_connects_at_most_the_cap_of_clients(host, owner, settings):
    settings.ETHAN_OAUTH_CLIENTS_PER_PERSON = 1
    host.tokens()
    second = register(host.client, client_name="Second Host")
    from tests.oauth_app.conftest import Host

    _, challenge = pkce()
    refused = Host(host.client, second["client_id"]).consent(challenge)
    again = host.tokens()  # the app already connected may consent again

    assert refused.status_code == 200
    assert "1 apps are connected to your memory (at most 1)" in refused.content.decode()
    assert again["scope"] == "memory.read memory.write"
    assert Connection.objects.filter(owner=owner).count() == 1


def test_the_issuer_comes_back_with_the_code(host):
    _, challenge = pkce()
    answer = host.consent(challenge)

    assert parse_qs(urlsplit(answer["Location"]).query)["iss"] == [ORIGIN]


def test_denying_sends_the_host_away_with_nothing_granted(host, owner):
    _, challenge = pkce()
    page = host.client.get("/oauth/authorize/", host.authorize_params(challenge))
    form = page.context["form"]
    fields = {
        name: form[name].value() or "" for name in form.fields if name not in ("allow", "write")
    }

    answer = host.client.post("/oauth/authorize/", fields)  # Deny: no `allow`

    query = parse_qs(urlsplit(answer["Location"]).query)
    assert answer.status_code == 302 and query["error"] == ["access_denied"]
    assert query["state"] == ["s1"]
    assert not Connection.objects.exists()
    assert not AccessToken.objects.filter(user=owner).exists()


def test_a_tampered_consent_leaves_no_connection(host, owner):
    _, challenge = pkce()
    page = host.client.get("/oauth/authorize/", host.authorize_params(challenge))
    form = page.context["form"]
    fields = {name: form[name].value() or "" for name in form.fields}
    fields.update(allow="on", redirect_uri="http://127.0.0.1:33418/elsewhere")

    answer = host.client.post("/oauth/authorize/", fields)

    assert answer.status_code == 400 and not answer.has_header("Location")
    assert not Connection.objects.exists()


@pytest.mark.parametrize(
    ("name", "redirect_uri", "marked"),
    [
        ("\u0421laude", "https://evil.example/cb", True),  # a Cyrillic С
        ("Chat\u200bGPT", "https://evil.example/cb", True),  # a zero-width space
        ("ChatGPT", "https://chatgpt.com/connector_platform_oauth_redirect", False),
        ("Claude", "https://claude.ai/api/mcp/auth_callback", False),
        ("My notes", "https://evil.example/cb", False),
    ],
)
def test_a_name_of_a_known_host_sent_elsewhere_is_marked(client, owner, name, redirect_uri, marked):
    client.force_login(owner)
    registered = register(client, client_name=name, redirect_uris=[redirect_uri])
    host = Host(client=client, client_id=registered["client_id"], redirect_uri=redirect_uri)
    _, challenge = pkce()

    page = client.get("/oauth/authorize/", host.authorize_params(challenge)).content.decode()

    assert ('id="impersonation-warning"' in page) is marked
