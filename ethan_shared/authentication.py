"""The API's token authentication: who `Authorization: Token <key>` (or `Bearer <key>`) is.

Its own module, importing nothing of DRF's views: DRF resolves DEFAULT_AUTHENTICATION_CLASSES
while its APIView class is being built, so a module that imports rest_framework.views (as
ethan_shared.api does) cannot hold them.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication


class ApiTokenAuthentication(TokenAuthentication):
    """The REST API's tokens (`ethan token NAME`) as `Authorization: Token <key>`: DRF's, with
    its token's person read in SQL. Every request to the API reads it, and the ORM's
    select_related query costs several times the read to build and compile."""

    def authenticate_credentials(self, key: str):
        from django.contrib.auth import get_user_model  # after the app registry, as below
        from rest_framework.authtoken.models import Token

        user_model = get_user_model()
        person_id, owner_id = user_model._meta.pk.column, Token._meta.get_field("user").column
        people = user_model.objects.raw(
            f"SELECT person.* FROM {user_model._meta.db_table} person"
            f" JOIN {Token._meta.db_table} token ON token.{owner_id} = person.{person_id}"
            " WHERE token.key = %s",
            [key],
        )
        person = next(iter(people), None)
        if person is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not person.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        # request.auth: the token by its key and person, as DRF gives it (its row is not read
        # again; nothing reads or saves it past those two).
        return person, Token(key=key, user=person)


class BearerTokenAuthentication(ApiTokenAuthentication):
    """The REST API's tokens as `Authorization: Bearer <key>`, the way OpenAI and MCP clients
    send a key."""

    keyword = "Bearer"
