"""ethan_shared.throttles.HomeFileCache: the file cache several processes count in without a
broker lists its folder at most once a second, and keeps every count under its cap."""

from __future__ import annotations

from unittest import mock

from ethan_shared.throttles import HomeFileCache


def cache_in(folder, **options) -> HomeFileCache:
    return HomeFileCache(str(folder), {"OPTIONS": options})


def test_the_folder_is_listed_once_a_second_not_before_every_write(tmp_path):
    cache = cache_in(tmp_path, MAX_ENTRIES=10_000)
    clock = mock.Mock(return_value=1000.0)
    with (
        mock.patch("ethan_shared.throttles.time.monotonic", clock),
        mock.patch.object(cache, "_list_cache_files", wraps=cache._list_cache_files) as listed,
    ):
        for n in range(50):
            cache.set(f"throttle_user_{n}", [n], 60)
        assert listed.call_count == 1
        clock.return_value = 1000.5
        cache.set("throttle_user_x", [1], 60)
        assert listed.call_count == 1
        clock.return_value = 1001.0
        cache.set("throttle_user_y", [1], 60)
        assert listed.call_count == 2


def test_counts_of_more_than_300_people_are_all_kept(tmp_path):
    """Django's default cap, 300, deleted a third of the counts at random past it."""
    cache = cache_in(tmp_path, MAX_ENTRIES=10_000)
    clock = mock.Mock(return_value=1000.0)
    with mock.patch("ethan_shared.throttles.time.monotonic", clock):
        for n in range(400):
            clock.return_value += 1.0  # every write lists the folder, as in a slow hour
            cache.set(f"throttle_user_{n}", [n], 60)
    assert all(cache.get(f"throttle_user_{n}") == [n] for n in range(400))


def test_past_its_cap_django_culls_as_before(tmp_path):
    cache = cache_in(tmp_path, MAX_ENTRIES=10, CULL_FREQUENCY=2)
    clock = mock.Mock(return_value=1000.0)
    with mock.patch("ethan_shared.throttles.time.monotonic", clock):
        for n in range(10):
            cache.set(f"k{n}", n, 60)
        assert len(cache._list_cache_files()) == 10
        clock.return_value = 1002.0
        cache.set("k10", 10, 60)
    assert len(cache._list_cache_files()) == 6  # half of ten culled, then the new one
