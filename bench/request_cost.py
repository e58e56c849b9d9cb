"""What one request costs `ethan serve`, a setting on against off, measured at the same time:
two servers run at once on one embedded home (SQLite, the offline model, the embedder off),
one with the settings given (--env), the other with the others (--before-env), and the
requests go to them in turn, one at a time, the server asked first alternating. Each server's
CPU a request (its process group's, over the measured requests) and the latency its client saw.
On a machine whose speed drifts from minute to minute, both sides meet the same drift.

python -m bench.request_cost --env ETHAN_REQUEST_THREADS_KEPT=8 \\
    --before-env ETHAN_REQUEST_THREADS_KEPT=0 --path /api/chat --requests 400

With --before CHECKOUT the other server is that checkout's `ethan serve` (its code, installed with
`make install`): a change measured against the code before it, the same way.

Paths: GET /v1/models (Django's middleware, the token, DRF and a small JSON answer) and POST
/api/chat (a whole turn with the offline model, answered as JSON, or streamed with --stream).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import ROOT, append_results, command_line, percentile
from bench.concurrent_streams import asgi_command, checkout_place
from bench.server import free_port, process_group_cpu

SIDES = ("change", "before")
WARM_UP = 30  # requests to each server before the measured ones


@dataclass
class Side:
    name: str
    settings: dict[str, str]
    checkout: Path | None = None  # another checkout's server; None: this one's
    process: subprocess.Popen | None = None
    url: str = ""


def settings_of(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.startswith("ETHAN_"):
            raise SystemExit(f"not an Ethan setting NAME=VALUE: {pair!r}")
        found[name] = value
    return found


def commit_of(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def environment(home: Path) -> dict[str, str]:
    """This process's environment without Ethan's settings, on `home`: the embedded default
    with the offline model and the embedder off, the API's rate out of the way."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ETHAN_", "DATABASE_URL", "CELERY_", "OPENAI_", "ANTHROPIC_"))
    }
    env.pop("WEB_CONCURRENCY", None)
    return {
        **env,
        "ETHAN_HOME": str(home),
        "ETHAN_EMBEDDER": "off",
        "ETHAN_API_RATE": "10000000/min",
    }


def ethan(args: list[str], env: dict[str, str]) -> str:
    ethan_bin = Path(sys.executable).parent / "ethan"
    done = subprocess.run(
        [str(ethan_bin), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        raise RuntimeError(f"ethan {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout.strip()


@contextlib.contextmanager
def served(sides: list[Side], env: dict[str, str]) -> Iterator[None]:
    """Both servers started (each its own process group), answering /healthz; stopped on the
    way out, whatever happens."""
    try:
        for side in sides:
            port = free_port()
            side.url = f"http://127.0.0.1:{port}"
            cwd, place = checkout_place(side.checkout) if side.checkout else (ROOT, {})
            side.process = subprocess.Popen(
                asgi_command(port=port, checkout=side.checkout),
                env={**env, **place, **side.settings},
                cwd=cwd,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        for side in sides:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{side.url}/healthz", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline or side.process.poll() is not None:
                    raise RuntimeError(f"the {side.name} server did not start")
                time.sleep(0.1)
        yield
    finally:
        for side in sides:
            if side.process is not None and side.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(side.process.pid, signal.SIGTERM)
                try:
                    side.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(side.process.pid, signal.SIGKILL)
                    side.process.wait()


def measure(sides: list[Side], *, path: str, stream: bool, requests: int, token: str) -> dict:
    scheme = "Bearer" if path.startswith("/v1") else "Token"
    body = {"message": "What is the capital of France?", "stream": stream}
    method = "POST" if path == "/api/chat" else "GET"
    clients = {
        side.name: httpx.Client(
            base_url=side.url, headers={"Authorization": f"{scheme} {token}"}, timeout=60
        )
        for side in sides
    }

    def ask(side: Side) -> float:
        started = time.perf_counter()
        answer = clients[side.name].request(method, path, json=body if method == "POST" else None)
        took = (time.perf_counter() - started) * 1000
        if answer.status_code >= 300:
            raise RuntimeError(f"{side.name}: {answer.status_code} {answer.text[:300]}")
        return took

    try:
        for side in sides:
            for _ in range(WARM_UP):
                ask(side)
        time.sleep(1.0)  # what the warm-up left to do (its vectors, its memory work)
        cpu = {side.name: process_group_cpu(side.process.pid) for side in sides}
        latency: dict[str, list[float]] = {side.name: [] for side in sides}
        for index in range(requests):
            for side in sides if index % 2 == 0 else reversed(sides):
                latency[side.name].append(ask(side))
        time.sleep(1.0)
        for side in sides:
            cpu[side.name] = process_group_cpu(side.process.pid) - cpu[side.name]
    finally:
        for client in clients.values():
            client.close()
    return {
        side.name: {
            "cpu_ms": cpu[side.name] * 1000 / requests,
            "p50": statistics.median(latency[side.name]),
            "p95": percentile(latency[side.name], 0.95),
        }
        for side in sides
    }


def run(args) -> dict:
    sides = [
        Side("change", settings_of(args.env)),
        Side("before", settings_of(args.before_env), checkout=args.before),
    ]
    home = Path(tempfile.mkdtemp(prefix="ethan-request-cost-"))
    try:
        env = environment(home)
        ethan(["manage", "migrate", "--noinput", "-v", "0"], env)
        token = ethan(["token", "bench"], env)
        rounds = []
        for _ in range(args.rounds):
            with served(sides, env):
                rounds.append(
                    measure(
                        sides,
                        path=args.path,
                        stream=args.stream,
                        requests=args.requests,
                        token=token,
                    )
                )
        return {"sides": sides, "rounds": rounds}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def table(result: dict, args) -> str:
    sides = result["sides"]
    what = f"{'POST' if args.path == '/api/chat' else 'GET'} {args.path}"
    what += " (streamed)" if args.stream and args.path == "/api/chat" else ""
    lines = [
        f"{what}, {args.requests} requests to each server a round, alternating, "
        f"{len(result['rounds'])} rounds, each on two fresh servers.",
        "",
        "| server | settings | CPU a request, ms (each round) | latency p50 / p95 ms (mean) |",
        "|---|---|---|---|",
    ]
    for side in sides:
        runs = [one[side.name] for one in result["rounds"]]
        settings = ", ".join(f"{k}={v}" for k, v in side.settings.items()) or "defaults"
        if side.checkout is not None:
            settings += f", the code of {side.checkout} ({commit_of(side.checkout)})"
        each = ", ".join(f"{r['cpu_ms']:.2f}" for r in runs)
        lines.append(
            f"| {side.name} | {settings} | "
            f"{statistics.fmean(r['cpu_ms'] for r in runs):.2f} ({each}) | "
            f"{statistics.fmean(r['p50'] for r in runs):.2f} / "
            f"{statistics.fmean(r['p95'] for r in runs):.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--before", type=Path, help="a checkout whose server is `before`")
    parser.add_argument("--path", choices=("/v1/models", "/api/chat"), default="/api/chat")
    parser.add_argument("--stream", action="store_true", help="POST /api/chat streamed")
    parser.add_argument("--requests", type=int, default=400, help="to each server, a round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-record", action="store_true", help="do not append to docs/")
    args = parser.parse_args(argv)
    rows = table(run(args), args)
    print(rows)
    if not args.no_record:
        append_results(
            "Request cost: a setting on and off, at the same time",
            command_line("bench.request_cost", argv),
            rows,
        )


if __name__ == "__main__":
    main()
