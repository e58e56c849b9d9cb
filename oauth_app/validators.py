"""django-oauth-toolkit's request validator (OAUTH2_VALIDATOR_CLASS), with what Ethan adds to
the token endpoint: an authorization code exchanged twice revokes the tokens its first
exchange gave (RFC 6749 §4.1.2: "If an authorization code is used more than once, the
authorization server MUST deny the request and SHOULD revoke (when possible) all tokens
previously issued based on that authorization code")."""

from __future__ import annotations

from oauth2_provider.oauth2_validators import OAuth2Validator

from oauth_app import services


class Validator(OAuth2Validator):
    def validate_code(self, client_id, code, client, request, *args, **kwargs) -> bool:
        valid = super().validate_code(client_id, code, client, request, *args, **kwargs)
        if not valid and client is not None:
            services.code_reused(code=code, application=client)
        return valid

    def save_bearer_token(self, token, request, *args, **kwargs) -> None:
        super().save_bearer_token(token, request, *args, **kwargs)
        if request.grant_type == "authorization_code" and token.get("access_token"):
            services.code_used(
                code=request.code, application=request.client, access_token=token["access_token"]
            )
