"""An MCP host for tests, as Claude or ChatGPT connects by URL: the site served whole (the one
ASGI application) on a loopback port, a client metadata document on a loopback https server of
the test's own CA, and the mcp SDK's OAuthClientProvider with a browser that signs the person in
and consents."""

from __future__ import annotations

import contextlib
import datetime
import functools
import ipaddress
import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

from tests.mcp_client import free_port, served_in_thread

REDIRECT = "http://127.0.0.1:33418/callback"


@contextlib.contextmanager
def served_site() -> Iterator[str]:
    """The server `make serve` runs (ethan_site.asgi: Django, and the MCP app at /mcp, one
    origin), under uvicorn in a thread of this process on the test's database, as
    tests.mcp_client serves the MCP app alone. Yields the origin."""
    import uvicorn

    from ethan_site.asgi import Doors  # holds the MCP app's own http_app, imported before

    def whole_site(*, host: str, port: int) -> Doors:
        return Doors()

    # As ethan_site.serve runs it: uvicorn trusts no proxy header (it would X-Forwarded-Proto
    # from loopback by default); the application does, with ETHAN_NUM_PROXIES.
    as_served = functools.partial(uvicorn.Config, proxy_headers=False)
    with (
        mock.patch("channels_app.mcp_server.server.http_app", whole_site),
        mock.patch("uvicorn.Config", as_served),
        served_in_thread() as url,
    ):
        yield url.removesuffix("/mcp")


# --- a loopback https server for client metadata documents --------------------------------------


@dataclass
class LoopbackCA:
    """A certificate authority of the test's own, and a certificate it signed for 127.0.0.1."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def make(cls, folder: Path) -> LoopbackCA:
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Ethan test CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        made = cls(folder / "ca.pem", folder / "cert.pem", folder / "key.pem")
        made.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        made.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        made.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return made


@dataclass
class DocumentServer:
    """Serves client metadata documents over https on loopback: `documents` by path, with
    `cache_control`; counts the fetches of each path; `delay` holds every answer."""

    origin: str
    documents: dict[str, bytes] = field(default_factory=dict)
    fetches: dict[str, int] = field(default_factory=dict)
    cache_control: str = "max-age=600"
    delay: float = 0.0

    def publish(self, path: str, **metadata) -> str:
        """A document at `path` naming itself as the client_id; returns the client_id."""
        client_id = self.origin + path
        self.documents[path] = json.dumps({"client_id": client_id, **metadata}).encode()
        return client_id


@contextlib.contextmanager
def document_server(ca: LoopbackCA) -> Iterator[DocumentServer]:
    port = free_port()
    served = DocumentServer(origin=f"https://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.fetches[self.path] = served.fetches.get(self.path, 0) + 1
            time.sleep(served.delay)
            body = served.documents.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", served.cache_control)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    with _https_served(Handler, port, ca):
        yield served


# --- the host: the SDK's OAuth client, and a browser -------------------------------------------


class MemoryStorage:
    """The SDK's TokenStorage, in memory (a host keeps it on disk)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class _Form(HTMLParser):
    """The fields of a page's first form, with its action."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form" and self.action is None and attributes.get("method") == "post":
            if "logout" not in (attributes.get("action") or ""):
                self.action = attributes.get("action") or ""
        elif (
            tag == "input"
            and self.action is not None
            and not self.done
            and attributes.get("type") in ("hidden", "text", "password")
            and attributes.get("name")
        ):
            self.fields[attributes["name"]] = attributes.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.action is not None:
            self.done = True


def form_of(page: str) -> _Form:
    parser = _Form()
    parser.feed(page)
    assert parser.action is not None, page
    return parser


class AuthorizationRefused(Exception):
    """The authorization page refused the request itself (no redirect back to the host)."""

    def __init__(self, status: int, page: str) -> None:
        super().__init__(status, page)
        self.status, self.page = status, page


class Browser:
    """The person's browser: it follows the authorization URL, signs in on the site's own
    page, and answers the consent page (Allow, with or without writing)."""

    def __init__(self, username: str, password: str, *, write: bool = True) -> None:
        self.username, self.password, self.write = username, password, write
        self.http = httpx2.AsyncClient(timeout=30)
        self.callback_url: str | None = None
        self.consent_pages: list[str] = []

    async def _follow(self, response: httpx2.Response) -> httpx2.Response:
        while response.is_redirect:
            location = urljoin(str(response.url), response.headers["location"])
            if location.startswith(REDIRECT):
                self.callback_url = location
                return response
            response = await self.http.get(location)
        return response

    async def authorize(self, authorization_url: str) -> None:
        page = await self._follow(await self.http.get(authorization_url))
        if "/accounts/login/" in str(page.url):
            form = form_of(page.text)
            form.fields.update(username=self.username, password=self.password)
            page = await self._follow(
                await self.http.post(urljoin(str(page.url), form.action), data=form.fields)
            )
        if self.callback_url is not None:
            return
        if page.status_code != 200:
            raise AuthorizationRefused(page.status_code, page.text)
        self.consent_pages.append(page.text)
        form = form_of(page.text)
        answer = {**form.fields, "allow": "on", **({"write": "on"} if self.write else {})}
        await self._follow(await self.http.post(str(page.url), data=answer))
        assert self.callback_url is not None, "the consent did not redirect back"

    async def callback(self) -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(self.callback_url).query)
        self.callback_url = None
        assert "code" in query, query
        return AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
        )


def provider_for(
    mcp_url: str, browser: Browser, storage: MemoryStorage, name: str = "Test Host", cimd: str = ""
) -> OAuthClientProvider:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name=name,
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.authorize,
        callback_handler=browser.callback,
        client_metadata_url=cimd or None,  # a client metadata document's URL, if it has one
    )


@dataclass
class DrippingServer:
    """An https server on loopback that answers every GET with a client metadata document's
    headers at once, then its body one byte every `interval` seconds (a host holding Ethan's
    fetch open). Counts the bytes it sent and the answers still dripping."""

    origin: str
    body: bytes
    interval: float = 1.0
    sent: int = 0
    dripping: int = 0
    answered: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def dripping_server(ca: LoopbackCA, length: int = 120) -> Iterator[DrippingServer]:
    port = free_port()
    origin = f"https://127.0.0.1:{port}"
    # A valid document once whole (padded with spaces), naming whichever path was asked.
    served = DrippingServer(origin=origin, body=b"")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            document = json.dumps(
                {
                    "client_id": origin + self.path,
                    "client_name": "Drip",
                    "redirect_uris": [REDIRECT],
                    "token_endpoint_auth_method": "none",
                }
            ).encode()
            body = document + b" " * max(0, length - len(document))
            served.body = body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            with lock:
                served.dripping += 1
            served.answered.set()
            try:
                for byte in range(len(body)):
                    if served.stop.wait(served.interval):
                        return
                    self.wfile.write(body[byte : byte + 1])
                    self.wfile.flush()
                    with lock:
                        served.sent += 1
            except OSError:
                return  # Ethan hung up
            finally:
                with lock:
                    served.dripping -= 1

        def log_message(self, *args) -> None:
            pass

    with _https_served(Handler, port, ca):
        try:
            yield served
        finally:
            served.stop.set()  # the drips still under way end before the server does


@contextlib.contextmanager
def _https_served(handler: type[BaseHTTPRequestHandler], port: int, ca) -> Iterator[None]:
    """`handler` on a loopback https port with the tests' CA's certificate, in a thread, for
    the block's length."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(ca.cert_file, ca.key_file)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()
