"""The MCP server through the official mcp SDK's client: over stdio (`ethan mcp --user …`
spawned as a host spawns it) and over streamable HTTP on a loopback port (the server in a thread,
on the test database, and `ethan mcp --http` as its own process)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from rest_framework.authtoken.models import Token

from memory_app.models import Fact, FactEvent, Procedure
from profile_app.models import ProfileRevision, ProfileSection
from sessions_app.models import ChatSession
from tests.conftest import ROOT, clean_env, end_group, start_in_group
from tests.mcp_client import (
    CLIENT_NAME,
    INITIALIZE,
    INITIALIZED,
    error_text,
    free_port,
    over_http,
    over_stdio,
    served_in_thread,
    structured,
)
from tests.web_server import api_token, migrated_home

TOOLS = {
    "memory_search",
    "memory_write",
    "procedure_write",
    "profile_get",
    "profile_update",
    "facts_list",
    "fact_forget",
    "episodes_search",
    "session_search",
}
RESOURCES = {"ethan://profile/user_profile.md", "ethan://procedures", "ethan://facts/injected"}


# --- over streamable HTTP, on the test database ------------------------------------------------


@pytest.fixture
def mcp_url(transactional_db):
    with served_in_thread() as url:
        yield url


def token_of(user) -> str:
    return Token.objects.get_or_create(user=user)[0].key


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # today's protocol, and the handshake
def test_every_tool_and_resource_over_http(mcp_url, owner, make_session, mode):
    make_session(owner, "我们下个月去里斯本旅行", "好的，听起来很棒")

    async def use(client):
        tools = await client.list_tools()
        listed = {tool.name: tool for tool in tools.tools}
        resources = await client.list_resources()
        calls = {
            "write": await client.call_tool(
                "memory_write", {"content": "用户在杭州做后端工程师", "category": "knowledge"}
            ),
            "again": await client.call_tool(
                "memory_write", {"content": "用户在杭州做后端工程师", "category": "knowledge"}
            ),
            "rule": await client.call_tool(
                "procedure_write", {"rule": "always reply in English", "context": "work"}
            ),
            "profile": await client.call_tool(
                "profile_update", {"section": "identity", "entry": "后端工程师，在杭州"}
            ),
            "read_profile": await client.call_tool("profile_get", {}),
            "search": await client.call_tool("memory_search", {"query": "杭州", "scope": "all"}),
            "messages": await client.call_tool(
                "memory_search", {"query": "里斯本", "scope": "messages", "limit": 5}
            ),
            "sessions": await client.call_tool("session_search", {"text": "里斯本"}),
            "episodes": await client.call_tool("episodes_search", {"query": "里斯本"}),
            "facts": await client.call_tool("facts_list", {"limit": 10, "min_confidence": 0.5}),
        }
        read = {
            uri: (await client.read_resource(uri)).contents[0].text for uri in sorted(RESOURCES)
        }
        fact_id = calls["write"].structured_content["fact"]["id"]
        calls["forget"] = await client.call_tool("fact_forget", {"id": fact_id})
        calls["after"] = await client.call_tool("facts_list", {})
        return listed, {str(r.uri) for r in resources.resources}, calls, read

    listed, resources, calls, read = over_http(mcp_url, token_of(owner), use, mode=mode)
    assert set(listed) == TOOLS and resources == RESOURCES
    for tool in listed.values():  # schemas with descriptions a model can use
        assert tool.description and tool.output_schema
        for field in tool.input_schema.get("properties", {}).values():
            assert field.get("description"), (tool.name, field)

    written = structured(calls["write"])["fact"]
    assert (written["source"], written["source_client"]) == ("mcp", CLIENT_NAME)
    assert structured(calls["again"])["reinforced"] is True
    assert structured(calls["rule"])["created"] is True
    assert structured(calls["profile"])["content"] == "- 后端工程师，在杭州"
    assert "后端工程师，在杭州" in structured(calls["read_profile"])["markdown"]
    assert [hit["kind"] for hit in structured(calls["search"])["hits"]] == ["fact"]
    message = structured(calls["messages"])["hits"][0]
    assert message["content"] == "我们下个月去里斯本旅行" and message["role"] == "user"
    [session] = structured(calls["sessions"])["sessions"]
    assert session["match"] == "我们下个月去里斯本旅行"
    assert structured(calls["episodes"]) == {"episodes": []}
    assert [f["content"] for f in structured(calls["facts"])["facts"]] == ["用户在杭州做后端工程师"]
    assert structured(calls["forget"]) == {
        "id": written["id"],
        "status": "evicted",
        "was": "active",
    }
    assert structured(calls["after"]) == {"facts": []}
    # The text content is the same JSON, for hosts that read text only.
    assert json.loads(calls["facts"].content[0].text) == structured(calls["facts"])

    assert read["ethan://procedures"] == "- always reply in English"
    assert (
        read["ethan://facts/injected"] == "- [knowledge, 0.96] 用户在杭州做后端工程师"
    )  # reinforced
    assert "## 身份与背景\n\n- 后端工程师，在杭州" in read["ethan://profile/user_profile.md"]

    # What the database holds: every write names the client.
    fact = Fact.objects.get(owner=owner)
    assert (fact.source, fact.source_client, fact.status) == ("mcp", CLIENT_NAME, "evicted")
    assert list(FactEvent.objects.filter(fact=fact).values_list("event", "actor")) == [
        ("add", f"mcp:{CLIENT_NAME}"),
        ("reinforce", f"mcp:{CLIENT_NAME}"),
        ("evict", f"mcp:{CLIENT_NAME}"),
    ]
    assert Procedure.objects.get(owner=owner).source == "mcp"
    section = ProfileSection.objects.get(owner=owner, key="identity")
    assert ProfileRevision.objects.filter(section=section, actor=f"mcp:{CLIENT_NAME}").exists()


def test_no_token_or_a_bad_one_is_401_and_never_anyones_memory(mcp_url, owner):
    from memory_app.services import fact_write

    fact_write(
        owner=owner, content="Ada 的秘密", category="knowledge", confidence=0.9, source="api"
    )
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "facts_list"}}
    ).encode()
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Token x"}):
        request = urllib.request.Request(
            mcp_url,
            data=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        answer = refused.value.read().decode()
        assert "秘密" not in answer and "invalid_token" in answer
    # The SDK's client with a bad token fails to connect at all.
    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own errors
        over_http(mcp_url, "not-a-token", lambda client: client.list_tools())


def test_two_people_never_see_or_write_each_others_memory(mcp_url, owner, other_owner):
    ada, grace = token_of(owner), token_of(other_owner)

    async def write(client):
        return await client.call_tool(
            "memory_write", {"content": "Ada 在 Acme 做后端工程师", "category": "knowledge"}
        )

    adas = structured(over_http(mcp_url, ada, write))["fact"]["id"]

    async def look(client):
        return (
            await client.call_tool("memory_search", {"query": "Acme 后端工程师"}),
            await client.call_tool("facts_list", {}),
            await client.call_tool("fact_forget", {"id": adas}),
            (await client.read_resource("ethan://facts/injected")).contents[0].text,
            await client.call_tool("memory_write", {"content": "Grace 喜欢茶"}),
        )

    search, listed, forget, injected, own = over_http(mcp_url, grace, look)
    assert structured(search) == {"hits": []} and structured(listed) == {"facts": []}
    assert "there is no fact" in error_text(forget) and injected == ""
    structured(own)
    assert list(Fact.objects.filter(owner=owner).values_list("content", "status")) == [
        ("Ada 在 Acme 做后端工程师", "active")
    ]
    assert list(Fact.objects.filter(owner=other_owner).values_list("content", flat=True)) == [
        "Grace 喜欢茶"
    ]


def test_bad_arguments_are_tool_errors_that_write_nothing(mcp_url, owner, settings):
    settings.ETHAN_PROCEDURE_CAPACITY = 1

    async def use(client):
        results = {
            "missing": await client.call_tool("memory_write", {}),
            "wrong_type": await client.call_tool("facts_list", {"limit": "many"}),
            "out_of_range": await client.call_tool("memory_search", {"query": "x", "limit": 0}),
            "bad_category": await client.call_tool(
                "memory_write", {"content": "x", "category": "gossip"}
            ),
            "too_long_fact": await client.call_tool("memory_write", {"content": "长" * 2001}),
            "too_long_query": await client.call_tool("memory_search", {"query": "q" * 1001}),
            "unknown_fact": await client.call_tool("fact_forget", {"id": 424242}),
            "unknown_section": await client.call_tool(
                "profile_update", {"section": "hobbies", "entry": "chess"}
            ),
            "blank_fact": await client.call_tool("memory_write", {"content": "   "}),
            "first_rule": await client.call_tool("procedure_write", {"rule": "be brief"}),
            "rule_past_capacity": await client.call_tool("procedure_write", {"rule": "be kind"}),
            "unknown_tool": await client.call_tool("memory_delete_everything", {}),
        }
        # Still serving after all that.
        results["fine"] = await client.call_tool("memory_write", {"content": "用户喜欢茶"})
        return results

    results = over_http(mcp_url, token_of(owner), use)
    assert "content" in error_text(results["missing"])
    assert "limit" in error_text(results["wrong_type"])
    assert "limit" in error_text(results["out_of_range"])
    assert "category" in error_text(results["bad_category"])
    assert "2000" in error_text(results["too_long_fact"])
    assert "1000" in error_text(results["too_long_query"])
    assert "there is no fact 424242" in error_text(results["unknown_fact"])
    assert "unknown profile section 'hobbies'" in error_text(results["unknown_section"])
    assert "a fact needs words" in error_text(results["blank_fact"])
    structured(results["first_rule"])
    assert "switch one off" in error_text(results["rule_past_capacity"])
    assert "memory_delete_everything" in error_text(results["unknown_tool"])
    structured(results["fine"])
    assert list(Fact.objects.values_list("content", flat=True)) == ["用户喜欢茶"]
    assert list(Procedure.objects.values_list("rule", flat=True)) == ["be brief"]
    assert not ProfileSection.objects.exclude(content="").exists()


def test_mcp_and_the_other_doors_share_one_memory(mcp_url, owner, fakes):
    """A fact written over MCP is found by /api/facts and injected into the next console turn;
    a fact taught in the console is found by memory_search over MCP."""
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    async def write(client):
        return await client.call_tool(
            "memory_write", {"content": "用户最喜欢的城市是里斯本", "category": "preference"}
        )

    structured(over_http(mcp_url, token_of(owner), write))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token_of(owner)}")
    [listed] = api.get("/api/facts").json()["results"]
    assert (listed["content"], listed["source"], listed["source_client"]) == (
        "用户最喜欢的城市是里斯本",
        "mcp",
        CLIENT_NAME,
    )

    openai_fake = fakes["openai"]
    openai_fake.fake.reply(openai_fake.text("Lisbon, of course."))
    call_command(
        "ethan_chat",
        "--user",
        "ada",
        "--model",
        "gpt-4o",
        stdout=StringIO(),
        stdin=StringIO("我最喜欢哪个城市？\n"),
    )
    system = openai_fake.system_of(openai_fake.fake.requests[-1].body)
    assert "用户最喜欢的城市是里斯本" in system

    call_command(
        "ethan_chat",
        "--user",
        "ada",
        "--model",
        "offline",
        stdout=StringIO(),
        stdin=StringIO("记住我喜欢喝美式咖啡\n"),
    )
    assert Fact.objects.filter(owner=owner, content__contains="美式咖啡").exists()

    async def search(client):
        return await client.call_tool("memory_search", {"query": "美式咖啡", "scope": "facts"})

    [hit] = structured(over_http(mcp_url, token_of(owner), search))["hits"]
    assert "美式咖啡" in hit["content"]
    assert ChatSession.objects.filter(owner=owner).count() == 2


# --- over stdio, `ethan mcp --user NAME` as a host spawns it ------------------------------------


@pytest.fixture
def home(tmp_path):
    return migrated_home(tmp_path / "home")


def _rows(home, sql: str, *params) -> list[tuple]:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return db.execute(sql, params).fetchall()


def test_every_tool_over_stdio(home):
    async def use(client):
        tools = {tool.name for tool in (await client.list_tools()).tools}
        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        results = [
            await client.call_tool("memory_write", {"content": "用户养了一只猫，叫 Miso"}),
            await client.call_tool("procedure_write", {"rule": "以后不要用韩语"}),
            await client.call_tool("profile_update", {"section": "基础特征", "entry": "养猫"}),
            await client.call_tool("profile_get", {}),
            await client.call_tool("memory_search", {"query": "Miso"}),
            await client.call_tool("facts_list", {}),
            await client.call_tool("episodes_search", {"query": "猫"}),
            await client.call_tool("session_search", {"text": "猫"}),
        ]
        bad = await client.call_tool("fact_forget", {"id": "one"})
        fact_id = results[0].structured_content["fact"]["id"]
        results.append(await client.call_tool("fact_forget", {"id": fact_id}))
        profile = (await client.read_resource("ethan://profile/user_profile.md")).contents[0]
        return tools, resources, results, bad, profile.text

    tools, resources, results, bad, profile = over_stdio(home, "ada", use)
    assert tools == TOOLS and resources == RESOURCES
    for result in results:
        structured(result)
    assert results[4].structured_content["hits"][0]["content"] == "用户养了一只猫，叫 Miso"
    assert "id" in error_text(bad)
    assert "- 养猫" in profile
    assert _rows(home, "SELECT username FROM auth_user") == [("ada",)]
    assert _rows(home, "SELECT content, source, source_client, status FROM memory_app_fact") == [
        ("用户养了一只猫，叫 Miso", "mcp", CLIENT_NAME, "evicted")
    ]
    assert _rows(home, "SELECT event, actor FROM memory_app_factevent ORDER BY id") == [
        ("add", f"mcp:{CLIENT_NAME}"),
        ("evict", f"mcp:{CLIENT_NAME}"),
    ]
    assert _rows(home, "SELECT rule, source FROM memory_app_procedure") == [
        ("以后不要用韩语", "mcp")
    ]


def test_stdio_writes_nothing_but_the_protocol_to_stdout(home):
    """Every line on stdout is a JSON-RPC message: logs and warnings go to stderr."""
    messages = [
        INITIALIZE,
        INITIALIZED,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "memory_write", "arguments": {"content": "用户喜欢爬山"}},
        },
    ]
    process = start_in_group(
        [sys.executable, "-m", "ethan_site.cli", "mcp", "--user", "ada"],
        cwd=ROOT,
        env=clean_env(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for message in messages:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            if "id" in message:
                lines.append(process.stdout.readline())
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        finally:
            end_group(process)
    answers = [json.loads(line) for line in lines]
    assert [answer["id"] for answer in answers] == [1, 2, 3]
    assert answers[0]["result"]["serverInfo"]["name"] == "ethan"
    assert not answers[2]["result"]["isError"]
    assert process.stdout.read() == ""  # nothing after the answers either
    assert _rows(home, "SELECT content, source_client FROM memory_app_fact") == [
        ("用户喜欢爬山", "raw")
    ]


def test_the_http_command_serves_with_its_health_and_needs_a_token(home):
    """`ethan mcp --http` as its own process (make serve-mcp, docker-compose's mcp service)."""
    token = api_token(home, "ada")
    port = free_port()
    process = start_in_group(
        [sys.executable, "-m", "ethan_site.cli", "mcp", "--http", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert json.load(r)["status"] == "ok"
                    break
            except OSError:
                assert process.poll() is None, process.stdout.read().decode()
                assert time.monotonic() < deadline, "ethan mcp --http did not start"
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"

        async def write(client):
            return await client.call_tool("memory_write", {"content": "用户住在里斯本"})

        structured(over_http(url, token, write, client_name="Cursor"))
        with pytest.raises(Exception):  # noqa: B017 - a 401, wrapped by the SDK
            over_http(url, "wrong", write)
    finally:
        end_group(process)
    assert _rows(home, "SELECT content, source_client FROM memory_app_fact") == [
        ("用户住在里斯本", "Cursor")
    ]
