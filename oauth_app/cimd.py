"""Fetching a client ID metadata document: the client_id is an https URL, and Ethan fetches it
(draft-ietf-oauth-client-id-metadata-document, which the MCP authorization specification
prefers to registration).

django-oauth-toolkit's SafeMetadataFetcher fetches it, and MetadataFetcher (the setting
CIMD_METADATA_FETCHER) is that fetcher, called through its one public method, `fetch`, with
its rules whole: https only; the host resolved once, every address public, and the connection
made to that checked address (no second lookup to rebind); no redirects; at most
CIMD_MAX_DOCUMENT_SIZE bytes read. Fewer fetches run at once than there are request threads
(CIMD_MAX_CONCURRENT_FETCHES, settings), and a URL not known yet counts as a registration from
its address (oauth_app.throttles). The document is cached for its Cache-Control max-age
(no-store and no-cache: the shortest), clamped between CIMD_METADATA_MIN_AGE_SECONDS and
CIMD_METADATA_MAX_AGE_SECONDS, on the Application row. A failed fetch is remembered for
CIMD_FAILURE_BACKOFF_SECONDS.

Ethan adds three things:

- one deadline for the whole fetch (CIMD_FETCH_TIMEOUT_SECONDS): the toolkit's urllib3 timeouts
  bound each read of the socket, not the body, and a host that sent a byte every 2 s held a
  request thread for 43 s. The fetch's sockets are shut at the deadline (`_cut_at`);
- the properties the MCP specification requires (client_name besides client_id and
  redirect_uris);
- its redirect-URI rule (oauth_app.clients), checked before the document becomes a client.

No private, loopback or link-local address is ever fetched: the toolkit refuses them, and
nothing here opens any. The tests' document servers on 127.0.0.1 are reached by a fetcher of
the tests' own (tests/oauth_app/fetcher.py), which their settings name instead.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Iterator

from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher
from oauth2_provider.settings import oauth2_settings

from oauth_app.clients import redirect_uri_refusal


class MetadataFetcher(SafeMetadataFetcher):
    """django-oauth-toolkit's fetcher, whole within its deadline, with the MCP specification's
    required properties and Ethan's redirect-URI rule."""

    def fetch(self, client_id: str) -> tuple[dict, int]:
        seconds = oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS
        with _cut_at(seconds) as cut:
            try:
                metadata, max_age = super().fetch(client_id)
            except Exception as exc:
                # A cut socket fails as whatever was reading it (a transport error, a body
                # short of its length, JSON that ends early): it is the deadline's failure.
                if cut.is_set():
                    raise _too_slow(seconds) from exc
                raise
        if cut.is_set():  # a body cut short that still parsed
            raise _too_slow(seconds)
        _check_required(metadata)
        _check_redirect_uris(metadata)
        return metadata, max_age


# --- the deadline ---------------------------------------------------------------------------
#
# The toolkit's fetch opens its sockets itself (urllib3, on the calling thread) and gives no
# handle on them, so Ethan learns of each one from Python's audit event "socket.connect"
# (sys.addaudithook, a public interface), on the fetching thread only, and keeps a duplicate of
# it: shutting the duplicate down ends any read or TLS handshake blocked on the connection,
# whichever socket object (the plain one, or the TLS one that took its descriptor over) the
# toolkit reads through. A hook cannot be removed, so one is added per process, and it does
# nothing on a thread that is not fetching.

_fetching = threading.local()  # .watch: the current fetch's _Watch, on its thread
_hook_lock = threading.Lock()
_hook_added = False


class _Watch:
    """The sockets one fetch connected (duplicates of them), shut together at its deadline."""

    def __init__(self) -> None:
        self.cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()  # the fetch's thread and the watchdog's

    def connecting(self, sock: socket.socket) -> None:
        with self._lock:
            duplicate = sock.dup()
            self._sockets.append(duplicate)
            if self.cut.is_set():  # a connection begun as the deadline passed
                with contextlib.suppress(OSError):
                    duplicate.shutdown(socket.SHUT_RDWR)

    def shut(self) -> None:
        with self._lock:
            self.cut.set()
            for duplicate in self._sockets:
                with contextlib.suppress(OSError):
                    duplicate.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            for duplicate in self._sockets:
                duplicate.close()
            self._sockets.clear()


def _on_audit_event(event: str, args: tuple) -> None:
    if event != "socket.connect":
        return
    watch = getattr(_fetching, "watch", None)
    if watch is not None:
        # A socket that cannot be watched is not connected (the error ends the attempt): no
        # connection of a fetch outlives its deadline.
        watch.connecting(args[0])


def _hook_added_once() -> None:
    global _hook_added
    with _hook_lock:
        if not _hook_added:
            sys.addaudithook(_on_audit_event)
            _hook_added = True


@contextlib.contextmanager
def _cut_at(seconds: float) -> Iterator[threading.Event]:
    """The block, with every socket it connects on this thread shut `seconds` after it began,
    whatever it is doing then; the event is set if it was. A socket timeout bounds each read
    only, and a host that sends a byte a second never trips it."""
    _hook_added_once()
    watch = _Watch()
    watchdog = threading.Timer(seconds, watch.shut)
    watchdog.daemon = True
    _fetching.watch = watch
    watchdog.start()
    try:
        yield watch.cut
    finally:
        watchdog.cancel()
        del _fetching.watch
        watch.close()


def _too_slow(seconds: float) -> CIMDError:
    return CIMDError(f"could not fetch client_id document: not whole within {seconds} s")


# --- what Ethan requires of a document --------------------------------------------------------


def _check_required(metadata: dict) -> None:
    """The properties the MCP authorization specification requires of a document: client_id
    (compared with the URL by django-oauth-toolkit), client_name (what the consent page shows)
    and redirect_uris."""
    name = metadata.get("client_name")
    if not isinstance(name, str) or not name.strip():
        raise CIMDError("client metadata must name the client (client_name)")


def _check_redirect_uris(metadata: dict) -> None:
    uris = metadata.get("redirect_uris")
    for uri in uris if isinstance(uris, list) else []:
        refusal = redirect_uri_refusal(uri) if isinstance(uri, str) else "not a string"
        if refusal:
            raise CIMDError(f"redirect_uris: {refusal}")
