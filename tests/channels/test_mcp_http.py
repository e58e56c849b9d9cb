"""The MCP server's HTTP door under load from one person: sessions per person, the initialize
throttle, and its error answers, through the mcp SDK's client and plain HTTP (what a token
holder can send) on a loopback port."""

from __future__ import annotations

import contextlib
import importlib.metadata

import httpx2
import pytest
from rest_framework.authtoken.models import Token

from channels_app.mcp_server.http import PersonalSessions
from tests.mcp_client import INITIALIZE, INITIALIZED, over_http, served_in_thread

ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def mcp_url(transactional_db):
    with served_in_thread() as url:
        yield url


@pytest.fixture
def sessions(monkeypatch) -> list[PersonalSessions]:
    """The served app's session manager, once served (to see which sessions it holds)."""
    adopted = []
    adopt = PersonalSessions.adopt
    monkeypatch.setattr(
        PersonalSessions, "adopt", lambda manager: adopted.append(adopt(manager)) or adopted[-1]
    )
    return adopted


@pytest.fixture
def http():
    with httpx2.Client(timeout=30, headers=ACCEPT) as client:
        yield client


def token_of(user) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def post(http, url: str, token: str, message: dict, session: str | None = None, **headers: str):
    headers = {"Authorization": f"Bearer {token}", **headers}
    if session:
        headers["Mcp-Session-Id"] = session
    return http.post(url, json=message, headers=headers)


def opened(http, url: str, token: str) -> str:
    """A session opened by hand, as a token holder can: initialize, then initialized. Left
    idle (no GET stream, nothing in flight)."""
    answer = post(http, url, token, INITIALIZE)
    assert answer.status_code == 200, answer.text
    session = answer.headers["mcp-session-id"]
    assert post(http, url, token, INITIALIZED, session).status_code == 202
    return session


async def tools_and_server(client):
    tools = await client.list_tools()
    return len(tools.tools), client.server_info


def test_mcp_sessions_past_the_cap_close_the_one_idle_longest(
    sessions, mcp_url, http, owner, settings
):
    settings.ETHAN_MCP_SESSIONS_PER_PERSON = 2
    ada = token_of(owner)
    [manager] = sessions
    first, second = opened(http, mcp_url, ada), opened(http, mcp_url, ada)
    post(http, mcp_url, ada, INITIALIZED, first)  # used again: `second` is now idle the longest
    closing = manager.sessions_of(str(owner.pk))[second]

    # A host connecting: its session is accepted, the idle one closed for it.
    tools, _ = over_http(mcp_url, ada, tools_and_server, mode="legacy")
    assert tools == 9
    gone = post(http, mcp_url, ada, INITIALIZED, second)
    assert (gone.status_code, gone.json()["error"]["message"]) == (404, "Session not found")
    assert closing.is_terminated  # its streams closed: its server task ends, its memory freed
    assert post(http, mcp_url, ada, INITIALIZED, first).status_code == 202

    # Opening past the cap again and again never holds more than the cap.
    last = [opened(http, mcp_url, ada) for _ in range(3)]
    assert post(http, mcp_url, ada, INITIALIZED, first).status_code == 404
    assert list(manager.sessions_of(str(owner.pk))) == last[1:]


def test_mcp_sessions_all_in_use_refuse_only_their_person(
    mcp_url, http, owner, other_owner, settings
):
    settings.ETHAN_MCP_SESSIONS_PER_PERSON = 2
    ada, grace = token_of(owner), token_of(other_owner)
    with contextlib.ExitStack() as streams:
        for _ in range(2):  # each session holds a GET stream open: in use, not idle
            session = opened(http, mcp_url, ada)
            headers = {"Authorization": f"Bearer {ada}", "Mcp-Session-Id": session}
            stream = streams.enter_context(http.stream("GET", mcp_url, headers=headers))
            assert stream.status_code == 200

        refused = post(http, mcp_url, ada, INITIALIZE)
        assert refused.status_code == 429
        assert refused.json() == {
            "error": "too_many_sessions",
            "error_description": "2 MCP sessions of this person are open and in use "
            "(at most 2): end one first",
        }
        # Another person is not refused because of Ada.
        tools, _ = over_http(mcp_url, grace, tools_and_server, mode="legacy")
        assert tools == 9


def test_mcp_initialize_past_the_rate_is_429_for_that_person_only(
    mcp_url, http, owner, other_owner, settings
):
    settings.ETHAN_MCP_INITIALIZE_RATE = "3/min"
    ada, grace = token_of(owner), token_of(other_owner)
    for _ in range(3):
        opened(http, mcp_url, ada)

    refused = post(http, mcp_url, ada, INITIALIZE)
    assert refused.status_code == 429
    wait = int(refused.headers["Retry-After"])
    assert 1 <= wait <= 60
    assert refused.json() == {
        "error": "rate_limited",
        "error_description": f"too many new MCP sessions; retry in {wait} s",
    }
    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 429 in its own errors
        over_http(mcp_url, ada, tools_and_server, mode="legacy")

    tools, _ = over_http(mcp_url, grace, tools_and_server, mode="legacy")
    assert tools == 9


def test_mcp_server_info_names_the_package_version(mcp_url, owner):
    _, server = over_http(mcp_url, token_of(owner), tools_and_server, mode="legacy")
    assert (server.name, server.version) == ("ethan", importlib.metadata.version("ethan"))
    assert server.version


@pytest.mark.parametrize(
    ("headers", "status", "error", "description"),
    [
        ({"Host": "evil.example"}, 421, "invalid_host", "Invalid Host header"),
        ({"Origin": "http://evil.example"}, 403, "invalid_origin", "Invalid Origin header"),
        ({"Content-Type": "text/plain"}, 400, "invalid_request", "Invalid Content-Type header"),
    ],
)
def test_mcp_transport_refusals_are_json(mcp_url, http, owner, headers, status, error, description):
    ada = token_of(owner)
    session = opened(http, mcp_url, ada)
    for on_session in (None, session):  # opening a session, and on an open one
        refused = post(http, mcp_url, ada, INITIALIZED, on_session, **headers)
        assert refused.status_code == status
        assert refused.headers["content-type"] == "application/json"
        assert refused.json() == {"error": error, "error_description": description}


def test_mcp_with_one_process_keeps_sessions(mcp_url, http, owner):
    """The default (ETHAN_SERVE_PROCESSES 1): a session opened is found again by its id."""
    ada = token_of(owner)
    session = opened(http, mcp_url, ada)
    listed = post(http, mcp_url, ada, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    assert listed.status_code == 200 and listed.headers["mcp-session-id"] == session
    assert post(http, mcp_url, ada, INITIALIZED, "not-a-session").status_code == 404


@pytest.fixture
def stateless_url(transactional_db, settings):
    """/mcp as each of several processes serves it (ethan_site.serve sets the count)."""
    settings.ETHAN_SERVE_PROCESSES = 2
    with served_in_thread() as url:
        yield url


def test_mcp_with_several_processes_keeps_no_session(stateless_url, http, owner, settings):
    """Any process can answer any request: none opens a session or needs one; a GET event
    stream (nothing to send on it) is 405, and `initialize` is still throttled per person."""
    settings.ETHAN_MCP_INITIALIZE_RATE = "2/min"
    ada = token_of(owner)
    answer = post(http, stateless_url, ada, INITIALIZE)
    assert answer.status_code == 200 and "mcp-session-id" not in answer.headers
    listed = post(http, stateless_url, ada, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert listed.status_code == 200 and "mcp-session-id" not in listed.headers
    assert '"memory_search"' in listed.text

    stream = http.get(stateless_url, headers={"Authorization": f"Bearer {ada}"})
    description = "this server keeps no MCP session: no event stream to open, POST each request"
    assert (stream.status_code, stream.headers["allow"], stream.json()) == (
        405,
        "POST",
        {"error": "method_not_allowed", "error_description": description},
    )

    # The SDK's client, as a host connects (its own initialize: the second of the minute).
    assert over_http(stateless_url, ada, tools_and_server, mode="legacy")[0] == 9
    refused = post(http, stateless_url, ada, INITIALIZE)
    assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
    # Past the rate, requests other than initialize are answered.
    pinged = post(http, stateless_url, ada, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert pinged.status_code == 200

    # Without a token: the SDK's 401, with the OAuth challenge, as JSON.
    unknown = post(http, stateless_url, "not-a-token", INITIALIZE)
    assert (unknown.status_code, unknown.json()["error"]) == (401, "invalid_token")
    assert "resource_metadata=" in unknown.headers["www-authenticate"]
