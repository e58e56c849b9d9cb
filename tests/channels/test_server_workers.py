"""`ethan serve --workers 2` over real sockets: two processes on one port, the kernel giving
each connection to either. Replies stream and are stored once, /mcp answers any request in
whichever process gets it (stateless), and SIGTERM stops them all."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.channels.test_server import ANSWER, Stream, _rows
from tests.mcp_client import over_http, structured
from tests.web_server import api_token, migrated_home, stored_contents, web_server

PROCESSES = 2
DRAIN_SECONDS = 10


def _workers(pid: int) -> set[int]:
    """The live worker processes uvicorn's supervisor `pid` spawned (not multiprocessing's
    resource tracker, its other child), from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Fields after the command name: state ppid ...
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in command:
            found.add(int(entry.name))
    return found


@pytest.fixture
def served(tmp_path, paced_openai):
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    env = {
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{paced_openai.url}/v1",
        "ETHAN_DRAIN_SECONDS": str(DRAIN_SECONDS),
    }
    with web_server(home, workers=PROCESSES, **env) as server:
        yield server, token


def test_two_processes_stream_replies_each_stored_once(served, paced_openai):
    """Six chats streamed at once through the official openai SDK: each is whole on the wire
    and stored once, whichever process wrote it."""
    server, token = served
    reply = "Both cores write replies."
    for _ in range(6):
        paced_openai.reply(paced_openai.text(reply), first_chunk_ms=200, chunk_ms=50)

    def chat(index: int) -> str:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0
        )
        stream = client.chat.completions.create(
            model="ethan/gpt-4o",
            messages=[{"role": "user", "content": f"question {index}"}],
            stream=True,
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(chat, range(6))) == [reply] * 6
    assert stored_contents(server.home, "assistant") == [reply] * 6
    assert sorted(stored_contents(server.home, "user")) == [f"question {i}" for i in range(6)]


def test_two_processes_answer_any_mcp_request(served):
    """The mcp SDK's client, each connection its own (so the processes share them): it
    initializes, lists the tools, writes a fact and finds it; every request is answered, none
    needs the process that answered the one before."""
    server, token = served
    url = f"http://127.0.0.1:{server.port}/mcp"

    def remember_and_find(city: str):
        async def use(mcp):
            tools = await _tool_names(mcp)
            written = structured(
                await mcp.call_tool("memory_write", {"content": f"Lives in {city}"})
            )
            found = structured(await mcp.call_tool("memory_search", {"query": city}))
            return tools, written, found

        return over_http(url, token, use, mode="legacy")

    for city in ("Porto", "Lisbon", "Braga", "Faro", "Evora", "Coimbra"):
        tools, written, found = remember_and_find(city)
        assert {"memory_write", "memory_search"} <= tools
        assert (written["fact"]["content"], written["reinforced"]) == (f"Lives in {city}", False)
        assert any(hit["content"] == f"Lives in {city}" for hit in found["hits"]), found
    # The SDK's own default, the newer protocol's discovery first, is answered as well.
    assert "memory_search" in over_http(url, token, _tool_names)


async def _tool_names(mcp) -> set[str]:
    return {tool.name for tool in (await mcp.list_tools()).tools}


def test_sigterm_stops_every_process_within_the_drain(served, paced_openai):
    """SIGTERM to the server: a reply being written finishes, and the supervisor and both its
    workers exit within ETHAN_DRAIN_SECONDS."""
    server, token = served
    deadline = time.monotonic() + 30
    while len(workers := _workers(server.process.pid)) < PROCESSES:
        assert time.monotonic() < deadline, workers
        time.sleep(0.1)
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=100, chunk_ms=50)
    stream = Stream(server, token)
    stream.first_words.wait(30)

    stopped = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=DRAIN_SECONDS + 5)
    assert time.monotonic() - stopped < DRAIN_SECONDS
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    assert stream.wait() == "done" and stream.text == ANSWER
    assert _rows(
        server.home,
        "SELECT content, interrupted FROM sessions_app_message WHERE role = 'assistant'",
    ) == [(ANSWER, 0)]


@pytest.mark.slow  # two server processes and ten turns at once: make test-slow
def test_the_same_first_message_sent_ten_times_at_once_is_one_session(tmp_path):
    """A client (or a double click) sending one conversation's first message ten times at once,
    to two processes: one session, the question stored once, every request answered."""
    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    # All ten wait for the one session at once, each counted under the person's cap in its
    # process (8 by default) while it waits: the kernel may give one process nine of them.
    with web_server(home, workers=PROCESSES, ETHAN_TURNS_PER_PERSON="10") as server:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0, timeout=60
        )

        def ask(_: int):
            return client.chat.completions.with_raw_response.create(
                model="ethan/offline",
                messages=[{"role": "user", "content": "My favourite tea is sencha."}],
            )

        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(ask, range(10)))
    assert {answer.http_response.status_code for answer in answers} == {200}
    assert len({answer.headers["x-ethan-session"] for answer in answers}) == 1
    assert stored_contents(home, "user") == ["My favourite tea is sencha."]
