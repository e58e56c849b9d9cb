"""Fetching client metadata documents (oauth_app.cimd): no private, loopback or link-local
target, ever, in production; a size limit, a deadline, the HTTP cache, and the redirect-URI
rule. The documents come from a loopback https server of the test's own CA, which the tests'
fetcher (tests/oauth_app/fetcher.py: production's with loopback opened) reaches."""

from __future__ import annotations

import pytest
from oauth2_provider.cimd import CIMDError, refresh_if_stale, resolve_cimd_application
from oauth2_provider.models import Application
from oauth2_provider.settings import oauth2_settings

from ethan_site import settings as production
from oauth_app.cimd import MetadataFetcher
from tests.oauth_app.fetcher import LoopbackMetadataFetcher
from tests.oauth_app.hosts import REDIRECT, LoopbackCA, document_server


@pytest.fixture
def documents(loopback_ca, db):
    with document_server(loopback_ca) as served:
        yield served


def host_document(documents, path="/host.json", **metadata) -> str:
    return documents.publish(
        path,
        **{
            "client_name": "Host",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            **metadata,
        },
    )


@pytest.mark.parametrize(
    "client_id",
    [
        "https://127.0.0.1/client.json",  # loopback
        "https://10.1.2.3/client.json",  # private
        "https://169.254.169.254/latest/meta-data",  # link-local: the cloud's metadata
        "https://[::1]/client.json",
        "https://[::ffff:10.0.0.1]/client.json",  # a private IPv4 inside an IPv6 address
    ],
)
def test_private_loopback_and_link_local_targets_are_refused(client_id):
    with pytest.raises(CIMDError, match="non-public address"):
        MetadataFetcher().fetch(client_id)


def test_tests_fetch_with_their_own_fetcher_and_production_with_ethans():
    # The module's own value, as a server started from it reads it (the tests' settings
    # override it for the tests).
    assert production.OAUTH2_PROVIDER["CIMD_METADATA_FETCHER"] == "oauth_app.cimd.MetadataFetcher"
    assert oauth2_settings.CIMD_METADATA_FETCHER is LoopbackMetadataFetcher


def test_production_refuses_a_loopback_document_the_tests_fetcher_reaches(documents, settings):
    """Loopback opened for this test, and a document served there: production's fetcher, named
    by production's settings, refuses it unasked; the tests' fetcher reaches it."""
    client_id = host_document(documents, client_name="Claude")
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "CIMD_METADATA_FETCHER": production.OAUTH2_PROVIDER["CIMD_METADATA_FETCHER"],
    }

    with pytest.raises(CIMDError, match=r"non-public address \(127.0.0.1\)"):
        MetadataFetcher().fetch(client_id)
    assert resolve_cimd_application(client_id, None) is None
    assert documents.fetches == {}

    metadata, _ = LoopbackMetadataFetcher().fetch(client_id)
    assert metadata["client_name"] == "Claude"
    assert documents.fetches == {"/host.json": 1}


def test_a_document_is_fetched_and_becomes_a_public_client(documents):
    client_id = host_document(documents, client_name="Claude")

    application = resolve_cimd_application(client_id, None)

    assert (application.name, application.client_type, application.redirect_uris) == (
        "Claude",
        Application.CLIENT_PUBLIC,
        REDIRECT,
    )


def test_a_document_over_the_size_limit_is_refused(documents):
    client_id = host_document(documents, client_name="x" * 20_000)

    with pytest.raises(CIMDError, match="maximum allowed size"):
        LoopbackMetadataFetcher().fetch(client_id)


def test_a_slow_server_is_given_up_on(documents, settings):
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_FETCH_TIMEOUT_SECONDS": 1}
    client_id = host_document(documents)
    documents.delay = 2

    with pytest.raises(CIMDError, match="could not fetch"):
        LoopbackMetadataFetcher().fetch(client_id)


def test_a_certificate_no_one_trusts_is_refused(documents, tmp_path, monkeypatch):
    client_id = host_document(documents)
    (tmp_path / "another").mkdir()
    another = LoopbackCA.make(tmp_path / "another")  # trusted instead of the server's CA
    monkeypatch.setattr(LoopbackMetadataFetcher, "ca_file", another.ca_file)

    with pytest.raises(CIMDError, match="could not fetch"):
        LoopbackMetadataFetcher().fetch(client_id)
    assert documents.fetches == {}  # no request sent over the refused connection


def test_redirect_uris_must_be_https_or_loopback(documents):
    client_id = host_document(documents, redirect_uris=["http://host.example/callback"])

    with pytest.raises(CIMDError, match="redirect URIs use https"):
        LoopbackMetadataFetcher().fetch(client_id)
    assert resolve_cimd_application(client_id, None) is None


def test_the_document_is_cached_for_its_max_age(documents, settings):
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_METADATA_MIN_AGE_SECONDS": 0}
    cached = host_document(documents, "/cached.json")
    documents.cache_control = "max-age=600"
    application = resolve_cimd_application(cached, None)
    refresh_if_stale(application, None)

    documents.cache_control = "no-store"
    uncached = host_document(documents, "/uncached.json")
    application = resolve_cimd_application(uncached, None)
    refresh_if_stale(application, None)

    assert documents.fetches == {"/cached.json": 1, "/uncached.json": 2}


def test_a_document_must_name_the_client(documents):
    client_id = documents.publish(
        "/nameless.json", redirect_uris=[REDIRECT], token_endpoint_auth_method="none"
    )

    with pytest.raises(CIMDError, match="client_name"):
        LoopbackMetadataFetcher().fetch(client_id)
