"""The page's reads of Ethan as an OAuth server (its Connected apps tab), scoped to the signed-in
owner. The facts' reads it shows are memory_app.selectors'."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from oauth_app.clients import client_domain, client_name, host_key
from oauth_app.models import Connection
from oauth_app.selectors import connections_for_owner


@dataclass
class ConnectedApp:
    """A row of the Connected apps tab: one host (the same name and redirect URIs: a host that
    registered again under another client id is still one app to the person), its connections
    under it, the latest first, and how many facts they stored (counted by client id,
    Connection.facts_written: two clients can give the same name). The page adds its labels
    and links to it."""

    connections: list[Connection]
    name: str
    domain: str
    verified: bool  # identified by a metadata document at its own https URL

    @property
    def connection(self) -> Connection:
        """The latest connection: what the row shows and what Disconnect names."""
        return self.connections[0]

    @property
    def written(self) -> int:
        return sum(connection.facts_written for connection in self.connections)


def connected_apps(*, owner: AbstractBaseUser) -> list[ConnectedApp]:
    """The owner's connected apps by host, the latest first, in one query whatever their
    number."""
    hosts: dict[tuple[str, tuple[str, ...]], ConnectedApp] = {}
    for connection in connections_for_owner(owner=owner):
        application = connection.application
        key = host_key(application)
        if key in hosts:
            hosts[key].connections.append(connection)
            continue
        hosts[key] = ConnectedApp(
            connections=[connection],
            name=client_name(application),
            domain=client_domain(application),
            verified=application.client_id.startswith("https://"),
        )
    return list(hosts.values())
