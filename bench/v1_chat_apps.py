"""What a chat app's ways cost a /v1 turn, against the same requests without them, in one run:

- recognising a housekeeping request (channels_app.openai.housekeeping.housekeeping_of), which
  every /v1 request now goes through: the recorded Open WebUI chat, with the recogniser and
  with it replaced by one that answers "a chat" at once;
- a chat app's own tools: the same chat with Open WebUI's 36 built-in tools (as it sends them)
  and without;
- a housekeeping request answered without memory (the recorded title prompt), beside the chat.

In-process (Django's test client: the door, the turn and the offline model, no socket), on the
embedded SQLite home .bench-home. The variants take turns request by request, each round
starting with the next one, so the machine's noise falls on all of them alike; each request is a
new conversation.

    python -m bench.v1_chat_apps               # 300 requests a variant
    python -m bench.v1_chat_apps --quick       # 60
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

from bench.common import ROOT, append_results, command_line, django_setup, percentile

RECORDED = ROOT / "tests" / "fixtures" / "clients" / "open-webui-0.12.4"


def _recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())["body"]


def _variants() -> dict[str, tuple[dict, bool]]:
    """name → (the request's body, whether the recogniser runs)."""
    chat = _recorded("02-chat_with_tools.json")
    chat["stream"] = False
    bare = {key: value for key, value in chat.items() if key != "tools"}
    title = _recorded("01-title.json")
    return {
        "chat, 36 tools, recognised": (chat, True),
        "chat, 36 tools, recogniser off": (chat, False),
        "chat, no tools, recognised": (bare, True),
        "title prompt (housekeeping)": (title, True),
    }


def _timed(client, token: str, body: dict, n: str) -> float:
    body = json.loads(json.dumps(body))
    if not body["messages"][0]["content"].startswith("### Task"):
        # A new conversation each time: the question differs (the same one again would be a
        # regenerate, answered without storing it).
        body["messages"][-1]["content"] += f" ({n})"
    started = time.perf_counter()
    answer = client.post(
        "/v1/chat/completions",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_HOST="localhost",  # one of the default ALLOWED_HOSTS (the test client's is not)
    )
    elapsed = (time.perf_counter() - started) * 1000
    assert answer.status_code == 200, answer.content[:300]
    return elapsed


def measure(requests: int) -> dict[str, list[float]]:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from channels_app.openai import apis

    owner, _ = get_user_model().objects.get_or_create(username="bench-v1")
    token = Token.objects.get_or_create(user=owner)[0].key
    client = Client()
    recognise: Callable = apis.housekeeping_of
    variants = _variants()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for warm in range(5):  # the first turns load what later ones reuse
        for name, (body, _) in variants.items():
            _timed(client, token, body, f"warm {warm} {name}")
    names = list(variants)
    for n in range(requests):
        # Each round starts with the next variant: none is always first (or always after the
        # same one) and pays what a round's first request pays.
        for name in names[n % len(names) :] + names[: n % len(names)]:
            body, recognised = variants[name]
            apis.housekeeping_of = recognise if recognised else (lambda messages: None)
            try:
                samples[name].append(_timed(client, token, body, f"{name} {n}"))
            finally:
                apis.housekeeping_of = recognise
    return samples


def report(samples: dict[str, list[float]]) -> str:
    def p(name: str, fraction: float) -> float:
        return percentile(samples[name], fraction)

    rows = ["| request | p50 ms | p95 ms |", "|---|---:|---:|"]
    for name in samples:
        rows.append(f"| {name} | {p(name, 0.5):.2f} | {p(name, 0.95):.2f} |")
    on, off = "chat, 36 tools, recognised", "chat, 36 tools, recogniser off"
    tools, bare = on, "chat, no tools, recognised"
    rows += [
        "",
        f"- recognising adds {p(on, 0.5) - p(off, 0.5):+.2f} ms at p50, "
        f"{p(on, 0.95) - p(off, 0.95):+.2f} ms at p95 (goal: under 1 ms p95)",
        f"- 36 client tools add {p(tools, 0.5) - p(bare, 0.5):+.2f} ms at p50, "
        f"{p(tools, 0.95) - p(bare, 0.95):+.2f} ms at p95 (reading them, offering them with "
        "Ethan's, the offline model's answer)",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="60 requests a variant")
    parser.add_argument("--no-append", action="store_true", help="print, do not record")
    args = parser.parse_args(argv)
    requests = 60 if args.quick else args.requests
    # Django's test client answers a JSON turn in the request's thread and leaves the turn's
    # generator to the collector, which gives its place under the per-person cap back late.
    os.environ.setdefault("ETHAN_TURNS_PER_PERSON", "100000")
    os.environ.setdefault("ETHAN_API_RATE", "100000/minute")  # the bench is one person, fast
    django_setup()
    table = report(measure(requests))
    print(table)
    if not args.no_append:
        append_results(
            f"/v1 and chat apps: recognising housekeeping, client tools ({requests} a variant)",
            command_line("bench.v1_chat_apps", argv),
            table,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
