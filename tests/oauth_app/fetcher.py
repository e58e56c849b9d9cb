"""The client metadata fetcher the tests use (tests/oauth_app/conftest.py names it in
OAUTH2_PROVIDER's CIMD_METADATA_FETCHER): Ethan's own, oauth_app.cimd.MetadataFetcher, with
every rule of it and of django-oauth-toolkit's fetcher under it, that may besides reach the
tests' document servers on 127.0.0.1 and trust the tests' CA, once a test has opened them (the
`loopback_ca` fixture sets `LoopbackMetadataFetcher.ca_file`). Production's fetcher has no
such path: test_cimd.py has it refuse a loopback document with loopback opened for the tests.

The toolkit decides both inside its fetch: an address is refused by its private
`_ip_is_public` (django-oauth-toolkit 3.4), and the certificates trusted are those of
`ssl.create_default_context()`. `toolkit_opened_to_loopback` wraps both for the test process
(a session fixture), and the wrappers open them only on a thread running this fetcher's fetch,
so production's fetcher, in the same process, still refuses loopback. A toolkit without
`_ip_is_public` fails every test that uses this fetcher, never quietly."""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from unittest import mock

from oauth2_provider import cimd

from oauth_app.cimd import MetadataFetcher

LOOPBACK = "127.0.0.1"  # where the tests' document servers listen (tests/oauth_app/hosts.py)

_running = threading.local()  # .ca_file: the CA opened, on a thread inside the fetch


class LoopbackMetadataFetcher(MetadataFetcher):
    # The CA of the test's document servers, opened by the test (the loopback_ca fixture);
    # None: production's rules, loopback refused and only the system's CAs trusted.
    ca_file: ClassVar[Path | None] = None

    def fetch(self, client_id: str) -> tuple[dict, int]:
        _running.ca_file = self.ca_file
        try:
            return super().fetch(client_id)
        finally:
            del _running.ca_file


@contextlib.contextmanager
def toolkit_opened_to_loopback() -> Iterator[None]:
    """The toolkit's address check and TLS trust, opened to 127.0.0.1 and the opened CA on the
    threads running LoopbackMetadataFetcher.fetch, and only there."""
    is_public = cimd._ip_is_public
    default_context = ssl.create_default_context

    def public_or_opened_loopback(ip: str) -> bool:
        return is_public(ip) or (_opened() is not None and ip == LOOPBACK)

    def context_trusting_the_opened_ca(*args, **kwargs) -> ssl.SSLContext:
        context = default_context(*args, **kwargs)
        if _opened() is not None:
            context.load_verify_locations(_opened())
        return context

    with (
        mock.patch.object(cimd, "_ip_is_public", public_or_opened_loopback),
        mock.patch.object(ssl, "create_default_context", context_trusting_the_opened_ca),
    ):
        yield


def _opened() -> Path | None:
    return getattr(_running, "ca_file", None)
