"""Fetching a client ID metadata document: the client_id is an https URL, and Ethan fetches it
(draft-ietf-oauth-client-id-metadata-document, which the MCP authorization specification
prefers to registration).

django-oauth-toolkit's SafeMetadataFetcher does much of it, and this keeps its rules: https
only; the host resolved once, every address checked, and the connection made to that checked
address (no second lookup to rebind); no redirects; at most CIMD_MAX_DOCUMENT_SIZE bytes read;
one deadline for the whole fetch (CIMD_FETCH_TIMEOUT_SECONDS), which Ethan enforces itself: its
urllib3 timeouts bound each read of the socket, not the body, and a host that sent a byte every
2 s held a request thread for 43 s (_fetched cuts the socket at the deadline). Fewer fetches run
at once than there are request threads (CIMD_MAX_CONCURRENT_FETCHES, settings), and a URL not
known yet counts as a registration from its address (oauth_app.throttles). The document cached
for its Cache-Control max-age (no-store and no-cache: the shortest), clamped between
CIMD_METADATA_MIN_AGE_SECONDS and CIMD_METADATA_MAX_AGE_SECONDS, on the Application row. A
failed fetch is remembered for CIMD_FAILURE_BACKOFF_SECONDS.

Ethan adds two things: the private networks a test may open (ETHAN_OAUTH_CIMD_PRIVATE_NETWORKS,
empty in production, so no private, loopback or link-local address is ever fetched) with the
CA that signs the test server's certificate (ETHAN_OAUTH_CIMD_CA_FILE); the properties the MCP
specification requires (client_name besides client_id and redirect_uris); and its redirect-URI
rule (oauth_app.clients), checked before the document becomes a client.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time

from django.conf import settings
from oauth2_provider import cimd
from oauth2_provider.settings import oauth2_settings

from oauth_app.clients import redirect_uri_refusal


def _allowed(ip: str) -> bool:
    if cimd._ip_is_public(ip):
        return True
    networks = [
        ipaddress.ip_network(n, strict=False) for n in settings.ETHAN_OAUTH_CIMD_PRIVATE_NETWORKS
    ]
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(address in network for network in networks)


def _addresses(hostname: str, port: int) -> list[str]:
    """The host's addresses, every one of them allowed, or CIMDError: a host that resolves to
    one public and one private address is refused whole, so the private one cannot be reached
    by retrying."""
    try:
        infos = socket.getaddrinfo(hostname, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise cimd.CIMDError(f"could not resolve client_id host: {exc}") from exc
    addresses = [info[4][0] for info in infos]
    refused = [ip for ip in addresses if not _allowed(ip)]
    if refused:
        raise cimd.CIMDError(f"client_id host resolves to a non-public address ({refused[0]})")
    if not addresses:
        raise cimd.CIMDError("client_id host did not resolve to any address")
    return addresses


class MetadataFetcher(cimd.SafeMetadataFetcher):
    def fetch(self, client_id: str) -> tuple[dict, int]:
        parsed = cimd._validate_client_id_url(client_id)
        port = parsed.port or 443
        addresses = _addresses(parsed.hostname, port)
        context = ssl.create_default_context()
        if settings.ETHAN_OAUTH_CIMD_CA_FILE:
            context.load_verify_locations(settings.ETHAN_OAUTH_CIMD_CA_FILE)
        path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
        headers = {"Host": parsed.netloc, "Accept": "application/json, application/*+json"}
        deadline = time.monotonic() + oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS
        last_error: Exception | None = None
        for ip in addresses:
            if deadline - time.monotonic() <= 0:
                break
            try:
                metadata, max_age = _fetched(
                    self, ip, port, parsed.hostname, path, headers, context, deadline
                )
            except (OSError, http.client.HTTPException) as exc:
                last_error = exc
                continue
            _check_required(metadata)
            _check_redirect_uris(metadata)
            return metadata, max_age
        raise cimd.CIMDError(f"could not fetch client_id document: {last_error}")


def _fetched(
    fetcher: MetadataFetcher,
    ip: str,
    port: int,
    hostname: str,
    path: str,
    headers: dict[str, str],
    context: ssl.SSLContext,
    deadline: float,
) -> tuple[dict, int]:
    """One address's document, within `deadline`: the connection, TLS, the headers and the
    whole body. A socket timeout bounds each read only, and a host that sends a byte a second
    never trips it (one did hold a request thread for 43 s), so the socket is shut at the
    deadline whatever it is doing, and any read blocked on it ends then."""
    sock = socket.create_connection((ip, port), timeout=max(0.01, deadline - time.monotonic()))
    expired = threading.Event()
    live = [sock]  # the socket in use: TLS takes the connection's over from the plain one

    def cut() -> None:
        expired.set()
        with contextlib.suppress(OSError):
            live[-1].shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            # Connected to the checked address; TLS (SNI, certificate) and Host use the name.
            tls = context.wrap_socket(sock, server_hostname=hostname)
            live.append(tls)
            if expired.is_set():
                raise TimeoutError("cut during the TLS handshake")
            connection = http.client.HTTPSConnection(hostname, port, context=context)
            connection.sock = tls
            try:
                connection.request("GET", path, headers=headers)
                document = fetcher._read_document(connection.getresponse())
            finally:
                connection.close()
        except (OSError, http.client.HTTPException, cimd.CIMDError) as exc:
            if expired.is_set():
                raise _too_slow() from exc
            raise
        if expired.is_set():  # a body cut short that still parsed
            raise _too_slow()
        return document
    finally:
        watchdog.cancel()
        for opened in live:
            opened.close()


def _too_slow() -> cimd.CIMDError:
    return cimd.CIMDError(
        "could not fetch client_id document: not whole within "
        f"{oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS} s"
    )


def _check_required(metadata: dict) -> None:
    """The properties the MCP authorization specification requires of a document: client_id
    (compared with the URL by django-oauth-toolkit), client_name (what the consent page shows)
    and redirect_uris."""
    name = metadata.get("client_name")
    if not isinstance(name, str) or not name.strip():
        raise cimd.CIMDError("client metadata must name the client (client_name)")


def _check_redirect_uris(metadata: dict) -> None:
    uris = metadata.get("redirect_uris")
    for uri in uris if isinstance(uris, list) else []:
        refusal = redirect_uri_refusal(uri) if isinstance(uri, str) else "not a string"
        if refusal:
            raise cimd.CIMDError(f"redirect_uris: {refusal}")
