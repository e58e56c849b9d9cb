"""The page's reads, every one scoped to the signed-in owner through the layer apps' own
scoping selectors (a foreign id is simply not found)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, F, OuterRef, QuerySet
from django.db.models.functions import Substr

from memory_app.models import Fact, MemoryReview
from memory_app.selectors import facts_for_owner
from oauth_app.clients import client_domain, client_name, host_key
from oauth_app.models import Connection
from oauth_app.selectors import connections_for_owner
from sessions_app.search import matching, query_terms

# The facts tab's orders: the injection order (what Ethan trusts most), the newest added, the
# most recently used (injected).
FACT_ORDERS = {
    "confidence": ("-confidence", "-last_accessed", "-id"),
    "recent": ("-created_at", "-id"),
    "used": ("-last_accessed", "-id"),
}
FACT_STATUSES = ("active", "evicted", "superseded", "all")
# How many earlier versions a fact's page follows back (each is one query).
VERSIONS_SHOWN = 20


@dataclass(frozen=True)
class FactFilters:
    query: str = ""
    category: str = ""
    source: str = ""
    status: str = "active"
    sort: str = "confidence"
    client: str = ""  # an MCP client's name: the facts it wrote (the Connected apps tab's link)


# What a listed fact shows: the page reads only these (the search words stay behind).
SHOWN_FIELDS = (
    "id",
    "content",
    "category",
    "confidence",
    "source",
    "source_client",
    "status",
    "hit_count",
    "created_at",
    "updated_at",
    "last_accessed",
    "session",
    "message",
    "superseded_by",
)


# How much of a source message a list shows beside its link (the fact's page shows more).
SAID_EXCERPT_CHARS = 120


def facts_shown(facts: QuerySet[Fact], start: int = 0, stop: int | None = None) -> list[Fact]:
    """Rows start:stop of `facts` as a page shows them, in two queries whatever their number:
    the facts, each with `message_seq` and `message_said` (the one message facts stored before
    `sources` name, joined here rather than in `facts`, so that a paginator's count stays an
    index-only scan), then `said_in`: the (session id, seq, the start of what was said) of
    every message each was said in, as plain tuples (model instances and a related manager per
    fact cost more than the query). Only the start of a message is read: it may be long."""
    excerpt = Substr("message__content", 1, SAID_EXCERPT_CHARS + 1)
    rows = list(
        facts.only(*SHOWN_FIELDS).annotate(message_seq=F("message__seq"), message_said=excerpt)[
            start:stop
        ]
    )
    said: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    if rows:
        links = (
            Fact.sources.through.objects.filter(fact_id__in=[row.pk for row in rows])
            .annotate(said=excerpt)
            .order_by("message__session_id", "message__seq")
            .values_list("fact_id", "message__session_id", "message__seq", "said")
        )
        for fact_id, session_id, seq, text in links:
            said[fact_id].append((session_id, seq, text))
    for row in rows:
        row.said_in = said[row.pk]
    return rows


def facts_listed(*, owner: AbstractBaseUser, filters: FactFilters) -> QuerySet[Fact]:
    """The facts tab: the owner's facts filtered and ordered as asked. Every word of the search
    must be found (through the search index; a search with no words in it, only punctuation
    or symbols, looks for the text itself)."""
    facts = facts_for_owner(owner=owner)
    if filters.status != "all":
        facts = facts.filter(status=filters.status)
    if filters.category:
        facts = facts.filter(category=filters.category)
    if filters.source:
        facts = facts.filter(source=filters.source)
    if filters.client:
        facts = facts.filter(source=Fact.Source.MCP, source_client=filters.client)
    if filters.query:
        terms = query_terms(filters.query)
        if terms:
            for term in terms:
                facts = matching(facts, [term])
        else:
            facts = facts.filter(content__icontains=filters.query)
    return facts.order_by(*FACT_ORDERS[filters.sort])


def review_mark(*, owner: AbstractBaseUser) -> MemoryReview | None:
    """The owner's "reviewed up to" mark (None: they never pressed "keep all")."""
    return MemoryReview.objects.filter(owner=owner, fact__isnull=True).first()


def facts_new(*, owner: AbstractBaseUser, mark: MemoryReview | None) -> QuerySet[Fact]:
    """新记住的: active facts added after the owner's mark that they have neither kept nor
    forgotten (a forgotten fact is evicted, so no longer active), newest first."""
    facts = facts_for_owner(owner=owner).filter(status=Fact.Status.ACTIVE)
    if mark is not None:
        facts = facts.filter(created_at__gt=mark.reviewed_at)
    kept = MemoryReview.objects.filter(fact=OuterRef("pk"))
    return facts.filter(~Exists(kept)).order_by("-created_at", "-id")


def fact_versions(*, fact: Fact) -> QuerySet[Fact]:
    """The earlier versions a fact replaced (superseded by it, or by one it replaced), the
    latest replaced first: its whole history across rows. One query per step back."""
    found: list[int] = []
    wanted = [fact.pk]
    while wanted and len(found) < VERSIONS_SHOWN:
        wanted = list(
            Fact.objects.filter(owner_id=fact.owner_id, superseded_by__in=wanted)
            .exclude(pk__in=[*found, fact.pk])
            .values_list("pk", flat=True)[: VERSIONS_SHOWN - len(found)]
        )
        found += wanted
    return Fact.objects.filter(pk__in=found).order_by("-updated_at", "-id")


def fact_shown(*, fact: Fact) -> Fact:
    """One fact as the facts tab shows it (with its sources), for its own page."""
    return facts_shown(Fact.objects.filter(pk=fact.pk))[0]


def facts_learnt_in(*, owner: AbstractBaseUser, session) -> QuerySet[Fact]:
    """The owner's facts said in this session's messages, most trusted first."""
    return (
        facts_for_owner(owner=owner)
        .filter(sources__session=session)
        .distinct()
        .order_by("-confidence", "-id")
    )


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
