"""An OAuth host as Django's test client: it registers, sends the person to consent, and
trades the code for tokens, as the mcp SDK's OAuthClientProvider does (the whole flow with
the SDK itself is in test_mcp_oauth.py). And the tests' settings for client metadata
documents: fetched by the tests' fetcher (tests/oauth_app/fetcher.py), which reaches the
document servers on 127.0.0.1 once a test opens them (`loopback_ca`)."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.oauth_app.fetcher import LoopbackMetadataFetcher, toolkit_opened_to_loopback
from tests.oauth_app.hosts import LoopbackCA

ORIGIN = "http://testserver"
RESOURCE = f"{ORIGIN}/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"
TEST_FETCHER = "tests.oauth_app.fetcher.LoopbackMetadataFetcher"


@pytest.fixture(autouse=True, scope="session")
def _toolkit_opened_to_loopback():
    with toolkit_opened_to_loopback():
        yield


@pytest.fixture(autouse=True)
def _test_metadata_fetcher(settings):
    """The tests' fetcher in place of production's (ethan_site.settings names
    oauth_app.cimd.MetadataFetcher): as production's until a test opens loopback."""
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_METADATA_FETCHER": TEST_FETCHER}


@pytest.fixture
def loopback_ca(tmp_path, monkeypatch) -> LoopbackCA:
    """The test's own CA, whose certificate for 127.0.0.1 its document servers show; the tests'
    fetcher reaches 127.0.0.1 and trusts this CA for the test's length."""
    ca = LoopbackCA.make(tmp_path)
    monkeypatch.setattr(LoopbackMetadataFetcher, "ca_file", ca.ca_file)
    return ca


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    return verifier, challenge.decode()


@dataclass
class Host:
    """A registered public client and the browser of the person it acts for, asking for tokens
    for `origin`/mcp (the test client's requests go to that origin's host)."""

    client: object  # django.test.Client, signed in as the person
    client_id: str
    redirect_uri: str = REDIRECT
    origin: str = ORIGIN

    @property
    def resource(self) -> str:
        return f"{self.origin}/mcp"

    def authorize_params(self, challenge: str, **extra: str) -> dict[str, str]:
        return {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "state": "s1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "scope": "memory.read memory.write",
            "resource": self.resource,
            **extra,
        }

    def consent(self, challenge: str, *, write: bool = True, **extra: str):
        """The consent page, then Allow: the redirect back to the host."""
        page = self.client.get("/oauth/authorize/", self.authorize_params(challenge, **extra))
        assert page.status_code == 200, page.content
        form = page.context["form"]
        data = {name: form[name].value() or "" for name in form.fields if name != "write"}
        data["allow"] = "on"
        if write:
            data["write"] = "on"
        return self.client.post("/oauth/authorize/", data)

    def code(self, challenge: str, **kwargs) -> str:
        answer = self.consent(challenge, **kwargs)
        assert answer.status_code == 302, answer.content
        query = parse_qs(urlsplit(answer["Location"]).query)
        assert query["state"] == ["s1"] and query["iss"] == [self.origin], query
        return query["code"][0]

    def token(self, code: str, verifier: str, **extra: str):
        return self.client.post(
            "/oauth/token/",
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.redirect_uri,
                "client_id": self.client_id,
                "code_verifier": verifier,
                "resource": self.resource,
                **extra,
            },
        )

    def tokens(self, **consent) -> dict:
        verifier, challenge = pkce()
        answer = self.token(self.code(challenge, **consent), verifier)
        assert answer.status_code == 200, answer.content
        return answer.json()

    def refresh(self, refresh_token: str):
        return self.client.post(
            "/oauth/token/",
            {
                "grant_type": "refresh_token",
                "refresh_token": refresh_token,
                "client_id": self.client_id,
                "resource": self.resource,
            },
        )


def register(client, **metadata) -> dict:
    answer = client.post(
        "/oauth/register/",
        {"client_name": "Test Host", "redirect_uris": [REDIRECT], **metadata},
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    return answer.json()


@pytest.fixture
def host(client, owner) -> Host:
    client.force_login(owner)
    return Host(client=client, client_id=register(client)["client_id"])


def host_at(client, person, origin: str, **metadata) -> Host:
    """A host registered and consenting at `origin` (the test client sends its Host)."""
    client.defaults["HTTP_HOST"] = origin.split("://", 1)[1]
    client.force_login(person)
    return Host(client=client, client_id=register(client, **metadata)["client_id"], origin=origin)
