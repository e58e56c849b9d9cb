"""Dynamic client registration (RFC 7591), the fallback for hosts without client metadata
documents: open, public clients only, redirect URIs checked, counted per address."""

from __future__ import annotations

from oauth2_provider.models import AccessToken, Application

from tests.oauth_app.conftest import REDIRECT


def post(client, metadata: dict):
    return client.post("/oauth/register/", metadata, content_type="application/json")


def test_a_host_registers_as_a_public_client_whatever_it_asked(client, owner):
    client.force_login(owner)  # a signed-in browser is not who registers
    answer = post(
        client,
        {
            "client_name": "Old Host",
            "redirect_uris": [REDIRECT, "https://host.example/callback"],
            "token_endpoint_auth_method": "client_secret_post",
            "grant_types": ["authorization_code", "refresh_token"],
        },
    )

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["token_endpoint_auth_method"] == "none" and "client_secret" not in body
    assert body["redirect_uris"] == [REDIRECT, "https://host.example/callback"]
    assert body["grant_types"] == ["authorization_code", "refresh_token"]
    application = Application.objects.get(client_id=body["client_id"])
    assert (application.name, application.client_type, application.user) == (
        "Old Host",
        Application.CLIENT_PUBLIC,
        None,
    )
    assert AccessToken.objects.get(application=application).user is None  # RFC 7592's


def test_redirect_uris_are_https_or_loopback(client, db):
    for uri in (
        "http://host.example/callback",
        "http://10.0.0.5/callback",
        "https://host.example/callback#frag",
        "javascript:alert(1)",
        "myapp://callback",
    ):
        answer = post(client, {"client_name": "X", "redirect_uris": [uri]})
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_redirect_uri"), uri
    for uri in ("http://localhost:8765/cb", "http://[::1]:8765/cb", "https://h.example/cb"):
        assert post(client, {"client_name": "X", "redirect_uris": [uri]}).status_code == 201
    assert Application.objects.count() == 3


def test_registration_is_counted_per_address(client, db, settings):
    settings.ETHAN_OAUTH_REGISTER_RATE = "2/hour"
    metadata = {"client_name": "X", "redirect_uris": [REDIRECT]}

    answers = [post(client, metadata) for _ in range(3)]
    elsewhere = client.post(
        "/oauth/register/", metadata, content_type="application/json", REMOTE_ADDR="10.1.2.3"
    )

    assert [a.status_code for a in answers] == [201, 201, 429]
    assert answers[2].json()["error"] == "too_many_requests"
    assert int(answers[2]["Retry-After"]) > 0
    assert elsewhere.status_code == 201
    assert Application.objects.count() == 3


def test_an_update_is_held_to_the_same_rules(client, db):
    registered = post(client, {"client_name": "Host", "redirect_uris": [REDIRECT]}).json()
    manage = registered["registration_client_uri"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {registered['registration_access_token']}"}

    refused = client.put(
        manage,
        {"client_name": "Host", "redirect_uris": ["http://attacker.example/cb"]},
        content_type="application/json",
        **auth,
    )
    updated = client.put(
        manage,
        {
            "client_name": "Host 2",
            "redirect_uris": ["https://host.example/cb"],
            "token_endpoint_auth_method": "client_secret_basic",
        },
        content_type="application/json",
        **auth,
    )

    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_redirect_uri")
    assert updated.status_code == 200, updated.content
    assert updated.json()["token_endpoint_auth_method"] == "none"
    application = Application.objects.get(client_id=registered["client_id"])
    assert (application.name, application.redirect_uris) == ("Host 2", "https://host.example/cb")
    assert application.client_type == Application.CLIENT_PUBLIC
