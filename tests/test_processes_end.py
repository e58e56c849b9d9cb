"""The tests' own process handling (tests.conftest): a process a test starts is ended with
every process under it, even those in a session of their own, as a benchmark's servers are."""

from __future__ import annotations

import sys
import time

from tests.conftest import end_group, process_running, run_in_group, start_in_group

# A leader that starts a child in a session of its own (out of the leader's group), a child of
# its own group, writes their pids, then waits to be ended.
LEADER = """
import os, subprocess, sys, time
apart = subprocess.Popen(["sleep", "300"], start_new_session=True)
grouped = subprocess.Popen(["sleep", "300"])
with open(sys.argv[1] + ".tmp", "w") as pids:
    pids.write(f"{apart.pid} {grouped.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


def test_end_group_ends_every_process_started_under_it(tmp_path):
    written = tmp_path / "pids"
    leader = start_in_group([sys.executable, "-c", LEADER, str(written)])
    try:
        deadline = time.monotonic() + 60
        while not written.exists():
            assert leader.poll() is None and time.monotonic() < deadline, "no pids written"
            time.sleep(0.05)
        pids = [int(pid) for pid in written.read_text().split()]
        assert all(process_running(pid) for pid in pids)
    finally:
        end_group(leader, grace_seconds=0)
    assert leader.returncode is not None
    assert not any(process_running(pid) for pid in pids)  # when it returns


def test_run_in_group_returns_what_the_process_said():
    ran = run_in_group(
        [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], input="hi"
    )
    assert (ran.returncode, ran.stdout) == (0, "HI\n")
