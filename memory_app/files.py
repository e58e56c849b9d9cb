"""The cold store's part of the ~/.ethan layout (docs/files.md): memory/facts.json (with the
optional `sources` provenance, [{session_id, seq}]) and memory/procedures.json.

Read: validated into plain rows, the limits (ethan_shared.limits) included. Import: in bulk and
idempotent (facts and procedures by normalised content), the keys and search tokens derived as
fact_write and procedure_write derive them (normalize.content_key,
services.fact_search_tokens). Export: the owner's active facts and all their procedures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch
from django.utils import timezone

from ethan_shared.layout import (
    BATCH,
    Imported,
    LayoutError,
    epoch,
    file_time,
    json_list,
    json_write,
    storable,
    text,
    whole_number,
    within,
)
from ethan_shared.limits import FACT_MAX_CHARS, RULE_CONTEXT_MAX_CHARS, RULE_MAX_CHARS
from memory_app.models import Fact, FactEvent, Procedure
from memory_app.normalize import content_key, normalize
from memory_app.services import fact_search_tokens
from sessions_app.models import Message

FACTS = "memory/facts.json"
PROCEDURES = "memory/procedures.json"


def _one_line(item: dict, key: str, where: str) -> str:
    """A fact's content or a rule as stored: whitespace collapsed, with words."""
    value = text(item, key, where, required=True)
    if not normalize(value):
        raise LayoutError(f"{where}: {key} is empty")
    return " ".join(value.split())


# --- facts -------------------------------------------------------------------------------------


def facts_read(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """memory/facts.json, validated; a LayoutError names the item."""
    facts = []
    for index, item in enumerate(json_list(path, FACTS, "facts")):
        where = f"{FACTS}, item {index}"
        confidence = item.get("confidence", 0.8)
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not (0 <= confidence <= 1)
        ):
            raise LayoutError(
                f"{where}: confidence must be a number from 0 to 1, not {confidence!r}"
            )
        category = item.get("category") or Fact.Category.KNOWLEDGE
        if category not in Fact.Category.values:
            raise LayoutError(
                f"{where}: category must be one of "
                f"{', '.join(Fact.Category.values)}, not {category!r}"
            )
        hits = whole_number(item, "hit_count", where, default=1)
        source = item.get("source") or Fact.Source.IMPORT
        if source not in Fact.Source.values:
            notes.append(f"{where}: source {source!r} is not known; stored as import")
            source = Fact.Source.IMPORT
        facts.append(
            {
                "content": within(
                    where, "a fact", _one_line(item, "content", where), FACT_MAX_CHARS
                ),
                "category": category,
                "confidence": float(confidence),
                "source": source,
                "hit_count": max(hits, 1),
                "created_at": file_time(item.get("created_at"), where) or timezone.now(),
                "last_accessed": file_time(item.get("last_accessed"), where),
                "sources": _fact_sources(item.get("sources"), where),
            }
        )
    return facts


def _fact_sources(value: Any, where: str) -> list[tuple[str, int]]:
    """A fact's provenance as Ethan exports it: [{session_id, seq}] (absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise LayoutError(f"{where}: sources must be a list of {{session_id, seq}}")
    sources = []
    for source in value:
        sid = source.get("session_id") if isinstance(source, dict) else None
        seq = source.get("seq") if isinstance(source, dict) else None
        if not isinstance(sid, str) or isinstance(seq, bool) or not isinstance(seq, int):
            raise LayoutError(f"{where}: a source must be {{session_id: text, seq: number}}")
        sources.append((storable(where, "a source's session_id", sid), seq))
    return sources


def facts_import(
    *, owner: AbstractBaseUser, rows: list[dict[str, Any]], notes: list[str]
) -> Imported:
    """Add the facts `owner` does not have yet (call it in a transaction, after the sessions:
    a fact's sources name their messages), each with its "add" history row."""
    known = set(Fact.objects.filter(owner=owner).values_list("content_key", flat=True))
    new: list[Fact] = []
    wanted: list[list[tuple[str, int]]] = []
    for row in rows:
        key = content_key(row["content"])
        if key in known:
            continue
        known.add(key)
        wanted.append(row["sources"])
        new.append(
            Fact(
                owner=owner,
                content_key=key,
                # As fact_write for a fact learnt from no one message (the consolidator's, an
                # import's): its own words.
                search_tokens=fact_search_tokens(row["content"], None),
                last_accessed=row["last_accessed"] or row["created_at"],
                updated_at=row["created_at"],
                **{k: v for k, v in row.items() if k not in ("last_accessed", "sources")},
            )
        )
    Fact.objects.bulk_create(new, batch_size=BATCH)
    sources = _sources_found(owner, [ref for refs in wanted for ref in refs])
    missing = sum(1 for refs in wanted for ref in refs if ref not in sources)
    if missing:
        notes.append(
            f"{FACTS}: {missing} source(s) name a message that is not in this import or the "
            "database; those facts are kept without them"
        )
    links = [
        Fact.sources.through(fact_id=fact.pk, message_id=sources[ref])
        for fact, refs in zip(new, wanted, strict=True)
        for ref in dict.fromkeys(refs)
        if ref in sources
    ]
    Fact.sources.through.objects.bulk_create(links, batch_size=BATCH)
    FactEvent.objects.bulk_create(
        [
            FactEvent(
                fact=fact,
                event=FactEvent.Kind.ADD,
                new_content=fact.content,
                new_confidence=fact.confidence,
                actor="import",
                sources=[{"session_id": s, "seq": q} for s, q in refs if (s, q) in sources],
            )
            for fact, refs in zip(new, wanted, strict=True)
        ],
        batch_size=BATCH,
    )
    return {"facts": (len(new), len(rows) - len(new))}


def _sources_found(owner: AbstractBaseUser, refs: list[tuple[str, int]]) -> dict:
    """(session_id, seq) → the owner's message id, for the ones that exist."""
    found: dict[tuple[str, int], int] = {}
    by_session: dict[str, set[int]] = {}
    for sid, seq in refs:
        by_session.setdefault(sid, set()).add(seq)
    for sid, seqs in by_session.items():
        rows = Message.objects.filter(session_id=sid, session__owner=owner, seq__in=seqs)
        for pk, seq in rows.values_list("pk", "seq"):
            found[(sid, seq)] = pk
    return found


def _fact_item(fact: Fact) -> dict[str, Any]:
    """A fact as facts.json holds it; `sources` only when it has some, so a layout that never
    had them exports as it was imported."""
    item = {
        "id": fact.pk,
        "content": fact.content,
        "category": fact.category,
        "confidence": fact.confidence,
        "source": fact.source,
        "created_at": epoch(fact.created_at),
        "last_accessed": epoch(fact.last_accessed),
        "hit_count": fact.hit_count,
    }
    sources = [{"session_id": m.session_id, "seq": m.seq} for m in fact.sources.all()]
    if sources:
        item["sources"] = sources
    return item


def facts_export(*, owner: AbstractBaseUser, home: Path) -> dict[str, int]:
    """Write `owner`'s active facts as home/memory/facts.json."""
    facts = [
        _fact_item(fact)
        for fact in Fact.objects.filter(owner=owner, status=Fact.Status.ACTIVE)
        .order_by("id")
        .prefetch_related(
            Prefetch("sources", queryset=Message.objects.order_by("session_id", "seq"))
        )
    ]
    json_write(home / FACTS, facts)
    return {"facts": len(facts)}


# --- procedures --------------------------------------------------------------------------------


def procedures_read(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """memory/procedures.json, validated; a LayoutError names the item."""
    procedures = []
    for index, item in enumerate(json_list(path, PROCEDURES, "procedures")):
        where = f"{PROCEDURES}, item {index}"
        active = item.get("active", True)
        if not isinstance(active, bool):
            raise LayoutError(f"{where}: active must be true or false, not {active!r}")
        procedures.append(
            {
                "rule": within(where, "a rule", _one_line(item, "rule", where), RULE_MAX_CHARS),
                "context": within(
                    where, "a rule's context", text(item, "context", where), RULE_CONTEXT_MAX_CHARS
                ),
                "active": active,
                "created_at": file_time(item.get("created_at"), where) or timezone.now(),
            }
        )
    return procedures


def procedures_import(
    *, owner: AbstractBaseUser, rows: list[dict[str, Any]], notes: list[str]
) -> Imported:
    """Add the rules `owner` does not have yet (call it in a transaction)."""
    known = set(Procedure.objects.filter(owner=owner).values_list("rule_key", flat=True))
    # Every active rule is in every turn's prompt, so at most ETHAN_PROCEDURE_CAPACITY are
    # active (services.procedure_check_capacity). The original CLI had no such limit: rather
    # than refuse a whole home over it, new active rules past it come in switched off, in file
    # order, and a note says so (the person chooses which to switch on).
    capacity = settings.ETHAN_PROCEDURE_CAPACITY
    room = capacity - Procedure.objects.filter(owner=owner, active=True).count()
    new, switched_off = [], 0
    for row in rows:
        key = content_key(row["rule"])  # as procedure_write keys a rule
        if key in known:
            continue
        known.add(key)
        active = row["active"]
        if active and room <= 0:
            active, switched_off = False, switched_off + 1
        elif active:
            room -= 1
        new.append(
            Procedure(
                owner=owner, rule_key=key, source=Fact.Source.IMPORT, **{**row, "active": active}
            )
        )
    Procedure.objects.bulk_create(new)
    if switched_off:
        notes.append(
            f"{PROCEDURES}: {switched_off} active rule(s) imported switched off: at most "
            f"{capacity} rules are active at once (ETHAN_PROCEDURE_CAPACITY); switch one off "
            "to switch another on"
        )
    return {"procedures": (len(new), len(rows) - len(new))}


def procedures_export(*, owner: AbstractBaseUser, home: Path) -> dict[str, int]:
    """Write all of `owner`'s rules, active or not, as home/memory/procedures.json."""
    procedures = [
        {
            "id": p.pk,
            "rule": p.rule,
            "context": p.context,
            "created_at": epoch(p.created_at),
            "active": p.active,
        }
        for p in Procedure.objects.filter(owner=owner).order_by("created_at", "id")
    ]
    json_write(home / PROCEDURES, procedures)
    return {"procedures": len(procedures)}
