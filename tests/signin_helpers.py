"""The sign-in throttle's clock under test (ethan_shared.throttles.LoginThrottle)."""

from __future__ import annotations

import pytest

from ethan_shared.throttles import LoginThrottle


class Clock:
    """Held still inside one window of the rate's period and moved on by hand: a test never
    depends on where a wall-clock minute ends."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # the start of a minute

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sign_in_clock(monkeypatch) -> Clock:
    """The throttle at its default rate, whatever the environment says, on a held clock."""
    monkeypatch.setattr(LoginThrottle, "THROTTLE_RATES", {"login": "10/min"})
    clock = Clock()
    monkeypatch.setattr(LoginThrottle, "timer", staticmethod(clock))
    return clock
