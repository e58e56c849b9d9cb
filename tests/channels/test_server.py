"""The one server (`ethan serve`, as `make serve` runs it) over real sockets: every door on one
port, many streams at once on one event loop, the caps, and a shutdown during a stream."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from email.message import Message
from pathlib import Path

import openai
import pytest

from tests.mcp_client import over_http, structured
from tests.web_server import Server, served_on_openai_fake

# 40 pieces of 4 characters: at 100 ms a piece, a reply that takes about 4 s to write.
ANSWER = "Every door is one turn, and the turn is one async generator on one loop. " * 2
DONE = object()


def _rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "ethan.sqlite3") as db:
        return db.execute(sql).fetchall()


class Stream:
    """A POST /api/chat stream read in a thread: the text of its deltas as they come, and how
    it ended (its last event's name, or the error that cut it)."""

    def __init__(self, server: Server, token: str, message: str = "tell me"):
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        self.connection.request(
            "POST",
            "/api/chat",
            body=json.dumps({"message": message, "stream": True}),
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        self.response = self.connection.getresponse()
        self.status = self.response.status
        self.text = ""
        self.ended: str | None = None
        self.first_words = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        name = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: ") and name == "delta":
                    self.text += json.loads(line[len("data: ") :])["text"]
                    self.first_words.set()
                elif line.startswith("data: ") and name in ("done", "error"):
                    self.ended = name
            if self.ended is None:
                self.ended = "cut"
        except (OSError, http.client.HTTPException) as exc:
            self.ended = f"cut: {type(exc).__name__}"
        finally:
            self.first_words.set()

    def wait(self, seconds: float = 60) -> str | None:
        self.thread.join(seconds)
        return self.ended


def _post_chat(server: Server, token: str, message: str) -> tuple[int, Message, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request(
            "POST",
            "/api/chat",
            body=json.dumps({"message": message}),
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return response.status, response.headers, json.loads(response.read())
    finally:
        connection.close()


@pytest.fixture
def served(tmp_path, paced_openai, request):
    env = getattr(request, "param", {})
    with served_on_openai_fake(tmp_path / "home", paced_openai, **env) as (server, token):
        yield server, token


def test_every_door_is_on_one_port(served, paced_openai):
    """/v1 with the openai SDK streaming, /api/chat, /mcp with the mcp SDK's client, the pages
    and /healthz: one process, one port."""
    server, token = served
    paced_openai.reply(paced_openai.text("I will remember Porto."), first_chunk_ms=20, chunk_ms=20)
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0
    )
    stream = client.chat.completions.create(
        model="ethan/gpt-4o", messages=[{"role": "user", "content": "I live in Porto"}], stream=True
    )
    words = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert words == "I will remember Porto."

    async def search(mcp):
        return structured(await mcp.call_tool("memory_search", {"query": "Porto"}))

    found = over_http(f"http://127.0.0.1:{server.port}/mcp", token, search)
    assert any("Porto" in hit["content"] for hit in found["hits"]), found

    paced_openai.reply(paced_openai.text("Yes."))
    status, _, answer = _post_chat(server, token, "Still there?")
    assert (status, answer["reply"]) == (200, "Yes.")
    assert server.request("GET", "/healthz").json()["status"] == "ok"
    page = server.request("GET", "/memory/")
    assert page.status == 302 and "/accounts/login/" in page.headers["location"]


def test_a_turns_answer_carries_what_the_middleware_added(served, paced_openai):
    """The view returns a stand-in for its started turn, which goes out through the middleware;
    the answer the server writes on the loop carries what they added (X-Frame-Options, the
    security headers, Vary), with its own Content-Type, streamed or not."""
    server, token = served
    paced_openai.reply(paced_openai.text("Yes."))
    status, headers, answer = _post_chat(server, token, "Hello?")
    assert (status, answer["reply"]) == (200, "Yes.")
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert int(headers["Content-Length"]) > 0

    paced_openai.reply(paced_openai.text("Streamed."))
    streamed = server.request(
        "POST",
        "/api/chat",
        body=json.dumps({"message": "And streamed?", "stream": True}),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    assert streamed.status == 200
    assert streamed.headers["Content-Type"] == "text/event-stream"
    assert streamed.headers["X-Frame-Options"] == "DENY"
    assert streamed.headers["Cache-Control"] == "no-cache"
    events = [line for line in streamed.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "event: started" and events[-1] == "event: done"
    assert "Streamed." in streamed.text


@pytest.mark.slow  # a load test: `make test-slow`
def test_many_streams_at_once_on_one_process(served, paced_openai):
    """40 replies written at once, each about 2 s long, by one process: every one completes
    and is stored once, and /healthz answers while they are open."""
    server, _ = served
    reply = "one two three four five six seven eight nine ten"
    for _ in range(40):
        paced_openai.reply(paced_openai.text(reply), first_chunk_ms=200, chunk_ms=150)
    # One person at a time may have ETHAN_TURNS_PER_PERSON (8) replies written: each stream
    # here is its own person's, through a token of their own.
    from tests.web_server import api_tokens

    tokens = api_tokens(server.home, [f"p{index}" for index in range(40)])
    streams = [Stream(server, tokens[index], f"question {index}") for index in range(40)]
    assert {s.status for s in streams} == {200}
    health = server.request("GET", "/healthz")
    open_meanwhile = sum(1 for s in streams if s.ended is None)
    assert health.status == 200 and open_meanwhile > 0
    assert [s.wait() for s in streams] == ["done"] * 40
    assert {s.text for s in streams} == {reply}
    assert _rows(
        server.home, "SELECT count(*) FROM sessions_app_message WHERE role = 'assistant'"
    ) == [(40,)]


@pytest.mark.parametrize("served", [{"ETHAN_DB_THREADS": "1"}], indirect=True)
def test_one_database_thread_still_writes_many_replies_at_once(served, paced_openai):
    """No thread is held while the model writes: with one thread for the turns' database
    steps, 8 replies are still written at once, not one after the other, and every one is
    stored."""
    from tests.web_server import api_tokens

    server, _ = served
    reply = " ".join(["word"] * 20)
    for _ in range(8):
        paced_openai.reply(paced_openai.text(reply), first_chunk_ms=200, chunk_ms=150)
    tokens = api_tokens(server.home, [f"t{index}" for index in range(8)])
    streams = [Stream(server, tokens[index], f"question {index}") for index in range(8)]
    for stream in streams:
        stream.first_words.wait(60)
    # One after the other, all but the last would have ended by now.
    assert sum(1 for s in streams if s.ended is None) >= 2
    assert [s.wait() for s in streams] == ["done"] * 8
    assert _rows(
        server.home, "SELECT count(*) FROM sessions_app_message WHERE role = 'assistant'"
    ) == [(8,)]


@pytest.mark.parametrize("served", [{"ETHAN_TURNS_PER_PERSON": "1"}], indirect=True)
def test_a_person_past_their_cap_gets_429_with_retry_after_and_nothing_is_stored(
    served, paced_openai
):
    server, token = served
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=100, chunk_ms=50)
    first = Stream(server, token)
    first.first_words.wait(30)
    status, headers, answer = _post_chat(server, token, "and another")
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert answer["retryable"] is True and "nothing was stored" in answer["detail"]
    assert first.wait() == "done"
    assert _rows(server.home, "SELECT content FROM sessions_app_message WHERE role = 'user'") == [
        ("tell me",)
    ]
    # Once the first has finished, the next is taken.
    paced_openai.reply(paced_openai.text("Sure."))
    assert _post_chat(server, token, "and another")[0] == 200


@pytest.mark.parametrize("served", [{"ETHAN_TURNS_PER_PROCESS": "1"}], indirect=True)
def test_a_full_process_answers_503_with_retry_after_to_anyone(served, paced_openai):
    from tests.web_server import api_token

    server, token = served
    other = api_token(server.home, "grace")
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=100, chunk_ms=50)
    first = Stream(server, token)
    first.first_words.wait(30)
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1", api_key=other, max_retries=0
    )
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(
            model="ethan/gpt-4o", messages=[{"role": "user", "content": "hello"}]
        )
    assert refused.value.status_code == 503
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert refused.value.body["code"] == "server_busy"
    assert first.wait() == "done"


@pytest.mark.parametrize("served", [{"ETHAN_DRAIN_SECONDS": "30"}], indirect=True)
def test_sigterm_during_a_stream_lets_it_finish_and_takes_nothing_new(served, paced_openai):
    server, token = served
    paced_openai.reply(paced_openai.text(ANSWER), first_chunk_ms=100, chunk_ms=100)
    stream = Stream(server, token)
    stream.first_words.wait(30)
    server.process.send_signal(signal.SIGTERM)
    # The server stops listening at once, while the reply is still being written.
    deadline = time.monotonic() + 10
    while True:
        try:
            server.request("GET", "/healthz")
        except (ConnectionRefusedError, ConnectionResetError):
            # Refused once the socket is closed; reset when the kernel had queued the
            # connection in the backlog just as the server closed it. Neither is served.
            break
        assert time.monotonic() < deadline, "the server still takes new connections"
        time.sleep(0.05)
    assert stream.ended is None, "the reply was over before the server stopped listening"
    assert stream.wait() == "done" and stream.text == ANSWER
    # uvicorn ends by raising the signal it was stopped with again, once all is done.
    assert server.process.wait(timeout=30) == -signal.SIGTERM
    assert _rows(
        server.home,
        "SELECT content, interrupted FROM sessions_app_message WHERE role = 'assistant'",
    ) == [(ANSWER, 0)]


@pytest.mark.parametrize("served", [{"ETHAN_DRAIN_SECONDS": "1"}], indirect=True)
def test_sigterm_past_the_drain_limit_stores_the_reply_so_far_as_interrupted(served, paced_openai):
    server, token = served
    paced_openai.reply(paced_openai.text(ANSWER * 3), first_chunk_ms=100, chunk_ms=100)
    stream = Stream(server, token)
    stream.first_words.wait(30)
    server.process.send_signal(signal.SIGTERM)
    # uvicorn ends by raising the signal it was stopped with again, once all is done.
    assert server.process.wait(timeout=30) == -signal.SIGTERM
    assert stream.wait().startswith("cut")
    [(stored, interrupted)] = _rows(
        server.home,
        "SELECT content, interrupted FROM sessions_app_message WHERE role = 'assistant'",
    )
    assert interrupted == 1
    assert stream.text and stored.startswith(stream.text) and (ANSWER * 3).startswith(stored)
    assert len(stored) < len(ANSWER * 3)
    # Nothing half-written: the question and the part-reply, and the session free again.
    assert _rows(server.home, "SELECT role FROM sessions_app_message ORDER BY seq") == [
        ("user",),
        ("assistant",),
    ]
    assert _rows(server.home, "SELECT turn_claim FROM sessions_app_chatsession") == [("",)]


def test_embedded_memory_work_runs_under_the_server(tmp_path):
    """Embedded mode (no broker) defers a turn's consolidation to after its reply; under the
    server the turn's database steps run in a pool, where no request ends, and the work still
    runs: what the person said becomes facts."""
    from tests.web_server import api_token, migrated_home, web_server

    home = migrated_home(tmp_path / "home")
    token = api_token(home, "ada")
    small = {"ETHAN_MEMORY_HOT_SIZE": "1", "ETHAN_MEMORY_COMPRESS_BATCH": "1"}
    with web_server(home, **small) as server:
        status, _, first = _post_chat(server, token, "I live in Porto.")
        assert status == 200
        for text in ("My sister is called Ana.", "I work as a nurse."):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            body = {"message": text, "session_id": first["session_id"]}
            connection.request(
                "POST",
                "/api/chat",
                body=json.dumps(body),
                headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
            )
            assert connection.getresponse().status == 200
            connection.close()
        deadline = time.monotonic() + 20
        facts: list = []
        while time.monotonic() < deadline and len(facts) < 2:
            facts = server.request(
                "GET", "/api/facts", headers={"Authorization": f"Token {token}"}
            ).json()["results"]
            time.sleep(0.2)
    learnt = " ".join(fact["content"] for fact in facts)
    assert "Porto" in learnt and "Ana" in learnt, facts


def test_healthz_is_answered_before_django(served):
    """/healthz on the one server answers a load balancer's probe whatever Host it sends (it
    probes by IP, which ALLOWED_HOSTS need not list), the same report as Django's view, GET
    only; a page with that Host is refused by Django."""
    server, _ = served
    probe = server.request("GET", "/healthz", headers={"Host": "10.1.2.3:8000"})
    assert probe.status == 200 and probe.headers["content-type"] == "application/json"
    assert probe.json() == {"status": "ok", "database": "ok", "broker": "embedded"}
    refused = server.request("POST", "/healthz", body="{}")
    assert (refused.status, refused.headers["allow"]) == (405, "GET")
    assert refused.json() == {"detail": "method not allowed"}
    assert (
        server.request("GET", "/accounts/login/", headers={"Host": "10.1.2.3:8000"}).status == 400
    )


@pytest.mark.parametrize(
    "served, thresholds",
    [
        ({"ETHAN_LOG_LEVEL": "INFO"}, "(20000, 20, 20)"),
        ({"ETHAN_LOG_LEVEL": "INFO", "ETHAN_GC_THRESHOLD": "0"}, "Python's own"),
    ],
    indirect=["served"],
)
def test_the_server_loads_the_models_sdk_before_it_takes_requests(served, thresholds):
    """The first turn of each process does not wait for the SDK's import or jieba's
    dictionary (over a second together): both are loaded at startup, before uvicorn says the
    application is up. Then what was loaded is left out of the garbage collector's passes,
    each of which stopped every stream for over 100 ms when it went over all of it, and the
    passes come less often (ETHAN_GC_THRESHOLD; 0: Python's own thresholds)."""
    server, _ = served
    log = server.log()
    loaded = log.find("loaded ahead of the first turn: the openai SDK and jieba's dictionary")
    started = log.index("Application startup complete")
    assert 0 <= loaded < started
    frozen = re.search(
        r"(\d+) objects loaded at startup left out of garbage collection; its thresholds (.+)",
        log,
    )
    assert frozen and loaded < frozen.start() < started, log
    assert int(frozen.group(1)) > 100_000
    if thresholds == "Python's own":  # this interpreter's, whatever its version
        thresholds = subprocess.run(
            [sys.executable, "-c", "import gc; print(gc.get_threshold())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    assert frozen.group(2).strip() == thresholds.strip()


def _database_files_open(server) -> int:
    """How many times the server process has its SQLite database open: one per connection."""
    database = str(server.home / "ethan.sqlite3")
    fds = Path(f"/proc/{server.process.pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == database)


@pytest.mark.parametrize(
    "served, kept",
    [({}, True), ({"ETHAN_SQLITE_KEEP_SECONDS": "0"}, False)],
    indirect=["served"],
)
def test_the_servers_threads_keep_their_database_connections(served, kept, paced_openai):
    """On SQLite the server's threads keep their connections (ETHAN_SQLITE_KEEP_SECONDS, 60),
    `ethan serve` in one process too, which has read the settings before it imports the
    application: after a turn and a probe the connections that served them are still open,
    rather than one opened and closed at every step of every turn. At 0, none is kept."""
    server, token = served
    paced_openai.reply(paced_openai.text("Yes."))
    status, _, answer = _post_chat(server, token, "Still there?")
    assert (status, answer["reply"]) == (200, "Yes.")
    assert server.request("GET", "/healthz").status == 200
    deadline = time.monotonic() + 10
    while _database_files_open(server) != 0 and not kept and time.monotonic() < deadline:
        time.sleep(0.1)  # the turn's last steps end just after its answer
    if kept:
        # The probe's thread's, and those of the threads that served the turn.
        assert _database_files_open(server) >= 2
    else:
        assert _database_files_open(server) == 0


def _niceness_of_threads(server: Server) -> dict[int, int]:
    """The nice value of each of the server process's threads, by thread id."""
    values = {}
    for task in Path(f"/proc/{server.process.pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a request's thread (Django's, one per request) just ended
            continue
        values[int(task.name)] = int(stat[stat.rindex(")") + 2 :].split()[16])
    return values


@pytest.mark.parametrize(
    "served, niceness",
    [({}, 10), ({"ETHAN_THREAD_NICENESS": "0"}, 0)],
    indirect=["served"],
)
def test_the_worker_threads_yield_the_cpu_to_the_event_loop(served, niceness, paced_openai):
    """On Linux the threads that run the turns' database steps have ETHAN_THREAD_NICENESS (10),
    the event loop's thread 0: when the CPU is short, the open streams and /healthz go first
    (ethan_shared.threads)."""
    server, token = served
    paced_openai.reply(paced_openai.text("Yes."))
    status, _, answer = _post_chat(server, token, "Still there?")
    assert (status, answer["reply"]) == (200, "Yes.")
    threads = _niceness_of_threads(server)
    assert threads[server.process.pid] == 0  # the main thread: the event loop
    niced = [tid for tid, value in threads.items() if value == niceness and value != 0]
    if niceness:
        # The turns' database threads (ETHAN_DB_THREADS, 2): the admission and a step.
        assert len(niced) >= 2, threads
    else:
        assert set(threads.values()) == {0}, threads
