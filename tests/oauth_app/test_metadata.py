"""Discovery: RFC 8414 authorization-server metadata and RFC 9728 protected-resource metadata,
as the MCP authorization specification has a host read them."""

from __future__ import annotations

from tests.oauth_app.conftest import ORIGIN


def test_authorization_server_metadata_names_every_endpoint_and_rule(client, db):
    answer = client.get("/.well-known/oauth-authorization-server")

    assert answer.status_code == 200
    assert answer.json() == {
        "issuer": ORIGIN,
        "authorization_endpoint": f"{ORIGIN}/oauth/authorize/",
        "token_endpoint": f"{ORIGIN}/oauth/token/",
        "revocation_endpoint": f"{ORIGIN}/oauth/revoke/",
        "registration_endpoint": f"{ORIGIN}/oauth/register/",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": ["memory.read", "memory.write"],
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    }


def test_protected_resource_metadata_of_mcp_and_of_the_origin(client, db):
    mcp = client.get("/.well-known/oauth-protected-resource/mcp")
    root = client.get("/.well-known/oauth-protected-resource")

    common = {
        "authorization_servers": [ORIGIN],
        "scopes_supported": ["memory.read", "memory.write"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Ethan memory",
    }
    assert mcp.status_code == root.status_code == 200
    assert mcp.json() == {"resource": f"{ORIGIN}/mcp", **common}
    assert root.json() == {"resource": ORIGIN, **common}
    assert client.get("/.well-known/oauth-protected-resource/api").status_code == 404


def test_metadata_names_the_public_url_when_set(client, db, settings):
    settings.ETHAN_PUBLIC_URL = "https://ethan.example.com"
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "OIDC_ISS_ENDPOINT": settings.ETHAN_PUBLIC_URL,
    }

    server = client.get("/.well-known/oauth-authorization-server").json()
    resource = client.get("/.well-known/oauth-protected-resource/mcp").json()

    assert server["issuer"] == "https://ethan.example.com"
    assert server["token_endpoint"] == "https://ethan.example.com/oauth/token/"
    assert resource["resource"] == "https://ethan.example.com/mcp"
    assert resource["authorization_servers"] == ["https://ethan.example.com"]
