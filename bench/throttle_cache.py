"""What counting one API request costs the process, in each store the throttles can count in
without a broker: the serving process's memory (one process, Django's LocMemCache), the files
several processes share (ethan_shared.throttles.HomeFileCache) and Django's own file cache it
replaced. A request is a read and a write of a person's history, as DRF's throttle makes them,
with N people's counts already stored.

python -m bench.throttle_cache --people 1,250,1000 --requests 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from bench.common import append_results, comma_sizes, command_line, django_setup

STORES = ("memory (LocMemCache)", "files, listed once a second (HomeFileCache)", "Django's files")


def store(name: str, folder: str):
    from django.core.cache.backends.filebased import FileBasedCache
    from django.core.cache.backends.locmem import LocMemCache

    from ethan_shared.throttles import HomeFileCache

    if name == STORES[0]:
        return LocMemCache(f"bench-{time.time_ns()}", {"OPTIONS": {"MAX_ENTRIES": 100_000}})
    if name == STORES[1]:
        return HomeFileCache(folder, {"OPTIONS": {"MAX_ENTRIES": 10_000}})
    return FileBasedCache(folder, {})  # Django's defaults: 300 entries, a third culled


def requests_cost(cache, people: int, requests: int) -> float:
    """CPU µs a request: a person's history read, the request's time added, written back."""
    for person in range(people):
        cache.set(f"throttle_user_{person}", [time.time()] * 3, 60)
    started = time.process_time()
    for n in range(requests):
        key = f"throttle_user_{n % people}"
        history = cache.get(key, [])
        history.insert(0, time.time())
        cache.set(key, history[:50], 60)
    return (time.process_time() - started) * 1e6 / requests


def run(args) -> dict[tuple[str, int], list[float]]:
    found: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        for people in comma_sizes(args.people):
            for name in STORES:  # in turn, so a drift of the machine meets every store
                folder = tempfile.mkdtemp(prefix="ethan-throttle-bench-")
                try:
                    cost = requests_cost(store(name, folder), people, args.requests)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
                found.setdefault((name, people), []).append(cost)
    return found


def table(found: dict[tuple[str, int], list[float]], args) -> str:
    rows = [
        f"{args.requests} requests a store, people's counts stored beforehand, "
        f"{args.repeats} repeats in turn.",
        "",
        "| store | people | CPU a request, µs (median) | each repeat |",
        "|---|---|---|---|",
    ]
    for (name, people), costs in found.items():
        each = ", ".join(f"{cost:.0f}" for cost in costs)
        rows.append(f"| {name} | {people:,} | {statistics.median(costs):.0f} | {each} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", default="1,250,1000")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    django_setup()
    text = table(run(args), args)
    print(text)
    if not args.no_record:
        append_results(
            "Throttle counts: the stores without a broker",
            command_line("bench.throttle_cache", argv),
            text,
            database="none (the cache alone)",
        )


if __name__ == "__main__":
    main()
