"""One sign-in throttle for every sign-in form (ethan_site.signin): the admin's and the site's
share its counts, per username and per client address, and a refused attempt checks no password.
The same in Chromium on the admin's form: tests/browser/test_sign_in.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client

from tests.signin_helpers import Clock

pytestmark = pytest.mark.django_db

PASSWORD = "right-password-1"
ADMIN = "/admin/login/"
SITE = "/accounts/login/"


@pytest.fixture
def clock(settings, sign_in_clock: Clock) -> Clock:
    # A cache of this test's own: the counting here (test_security.py shares one between
    # gunicorn workers; the browser test uses the services suite's Redis).
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    cache.clear()  # every LocMemCache of one name is one store, another test's counts in it
    return sign_in_clock


@pytest.fixture(autouse=True)
def _quick_hashes(settings):
    # Dozens of password checks a test: the throttle is under test, not PBKDF2's cost.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ada(db):
    return get_user_model().objects.create_superuser("ada", password=PASSWORD)


def sign_in(form: str, username: str, password: str, *, client: Client | None = None, **extra):
    client = client or Client()
    answer = client.post(form, {"username": username, "password": password}, **extra)
    answer.signed_in = "_auth_user_id" in client.session
    return answer


@pytest.mark.parametrize("form", [ADMIN, SITE])
def test_sign_in_form_refuses_even_the_right_password_after_ten_wrong_ones(clock, ada, form):
    client = Client()
    guesses = [sign_in(form, "ada", f"guess{i}", client=client) for i in range(25)]
    assert [g.status_code for g in guesses] == [200] * 10 + [429] * 15
    assert {g["Retry-After"] for g in guesses[10:]} == {"60"}
    assert "Too many attempts: try again in 60 seconds." in guesses[-1].content.decode()
    # Refused before the password is checked: the right one does not get in either.
    refused = sign_in(form, "ada", PASSWORD, client=client)
    assert (refused.status_code, refused.signed_in) == (429, False)
    # The form is shown again, empty, ready for when the wait is over.
    assert 'name="password"' in refused.content.decode()
    assert PASSWORD not in refused.content.decode()

    clock.now += 60  # the next window
    welcome = sign_in(form, "ada", PASSWORD, client=client)
    assert (welcome.status_code, welcome.signed_in) == (302, True)


def test_admin_and_site_forms_share_one_count(clock, ada):
    client = Client()
    statuses = [
        sign_in(form, "ada", "wrong", client=client).status_code for form in [ADMIN, SITE] * 5
    ]
    assert statuses == [200] * 10
    for form in (ADMIN, SITE):
        refused = sign_in(form, "ada", PASSWORD, client=client)
        assert (refused.status_code, refused.signed_in) == (429, False)


def test_sign_in_is_counted_per_username_across_addresses(clock, ada, settings):
    """Behind one proxy (ETHAN_NUM_PROXIES=1) the client is the last X-Forwarded-For address:
    guesses at one name from ten addresses use up that name, not the addresses."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    get_user_model().objects.create_user("bob", password=PASSWORD)

    def via(address: str) -> dict[str, str]:
        return {"HTTP_X_FORWARDED_FOR": f"198.51.100.7, {address}"}

    guesses = [
        sign_in(SITE, "ada", "wrong", **via(f"203.0.113.{i}")).status_code for i in range(10)
    ]
    assert guesses == [200] * 10
    refused = sign_in(ADMIN, "ada", PASSWORD, **via("203.0.113.99"))
    assert (refused.status_code, refused.signed_in) == (429, False)
    # The addresses are not used up: another name from one of them still signs in.
    other = sign_in(SITE, "bob", PASSWORD, **via("203.0.113.0"))
    assert (other.status_code, other.signed_in) == (302, True)


def test_sign_in_is_counted_per_address_across_usernames(clock, ada):
    guesses = [
        sign_in(SITE, f"name{i}", "wrong", REMOTE_ADDR="192.0.2.5").status_code for i in range(10)
    ]
    assert guesses == [200] * 10
    refused = sign_in(ADMIN, "ada", PASSWORD, REMOTE_ADDR="192.0.2.5")
    assert (refused.status_code, refused.signed_in) == (429, False)
    # The name is not used up: from another address it signs in.
    welcome = sign_in(ADMIN, "ada", PASSWORD, REMOTE_ADDR="192.0.2.6")
    assert (welcome.status_code, welcome.signed_in) == (302, True)


def test_a_name_is_counted_however_it_is_written(clock, ada):
    """The form's NFKC-normalised name, case folded: "ＡＤＡ" and "Ada" are guesses at ada."""
    for i, name in enumerate(["ada", "Ada", "ＡＤＡ", "ADA", "ada"] * 2):
        assert sign_in(SITE, name, "wrong", REMOTE_ADDR=f"192.0.2.{i}").status_code == 200
    refused = sign_in(SITE, "ada", PASSWORD, REMOTE_ADDR="192.0.2.99")
    assert (refused.status_code, refused.signed_in) == (429, False)


def test_sign_in_with_the_cache_down_is_let_through(ada, settings, monkeypatch, caplog):
    """As for API requests: a sign-in must not fail because its attempts cannot be counted."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    # The session lives in the database here (the default), not in the cache that is down.
    welcome = sign_in(SITE, "ada", PASSWORD)
    assert (welcome.status_code, welcome.signed_in) == (302, True)
    assert "sign-in not counted (cache unavailable: ConnectionError)" in caplog.text


class EvictingCache(LocMemCache):
    """A cache under memory pressure at the worst moment: what add() stores is gone before
    the incr() that follows it."""

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None) -> bool:
        return True


def test_sign_in_counts_survive_a_counter_evicted_mid_count(clock, ada, settings):
    settings.CACHES = {"default": {"BACKEND": f"{__name__}.EvictingCache", "LOCATION": "evicting"}}
    cache.clear()
    statuses = [sign_in(SITE, "ada", "wrong").status_code for _ in range(11)]
    assert statuses == [200] * 10 + [429]
