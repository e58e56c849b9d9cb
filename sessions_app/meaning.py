"""The other half of the one search engine: memory found by meaning (embedder/), fused with BM25
(sessions_app.search).

Each searchable row (a message, a fact, an episode) keeps a vector beside it: `embedding`, an
int8 blob (embedder.to_blob), and `embedding_model`, the name of the embedder that wrote it.
They are written in the background after the turn commits (agent_app.vectors), never on a
turn's path; a row with no vector yet, or one of another embedder, is found by its words alone
until the background reaches it. Vectors of different embedders are never compared: a scan
reads only the rows of the configured embedder's name.

A search then:
1. computes its query's vector once, and only when a stored vector is found to compare it
   with (query_vector and Query; the embedder remembers the vectors of the texts it embedded
   last, so the turn's injection of facts and episodes and a memory_search of the same words
   share one, whichever thread runs them);
2. scans the owner's vectors in numpy, chunk by chunk, newest first, at most TUNING.scan_cap of
   them (nearest: memory and time stay bounded at any history size);
3. fuses the two rankings over the union of their candidates (fuse):

       fused(d) = (1 - w) * bm25(d) / best bm25  +  w * meaning(d)
       meaning(d) = clip((cos(d) - median cos) / (best cos - median cos), 0, 1)

   with w = TUNING.weight. Cosines are normalised against the owner's own spread (the median
   and the best of the scanned rows), because an embedder's raw cosines are small and shift
   from one question to another (the default's paraphrases score 0.07 against 0.01 for
   unrelated text): only their order within one owner's rows says something.

With the embedder off every search is BM25 alone, exactly as before (fuse is not called).
docs/search.md has the numbers behind TUNING.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet

import embedder
from sessions_app.models import ChatSession, Message
from sessions_app.search import SPOKEN, Ranked


@dataclass(frozen=True)
class Tuning:
    """The fusion's weights, chosen together on LoCoMo's half A only (bench/meaning_recall.py,
    recall@10 of the dialogue) and reported on half B and on single-speaker logs
    (docs/search.md, "Memory found by meaning")."""

    # The share of the fused score that comes from meaning (A chose 0.3 of 0.2-0.8; past 0.5
    # recall falls on every shape).
    weight: float = 0.3
    # A message's vector is its own text's plus its neighbours' (the spoken turns before and
    # after it), each counting this much, as BM25 indexes it (search.with_context). A chose 1.0
    # of 0, 0.5 and 1.0; single-speaker logs would have chosen 0 (docs/search.md).
    context_weight: float = 1.0
    # The embedder's own candidates added to BM25's, per search: its top `candidates` rows.
    candidates: int = 50
    # The newest vectors of one owner and kind a search compares at most: a bound on its time
    # and memory whatever the history's size (older rows are still found by their words).
    scan_cap: int = 200_000


TUNING = Tuning()
# Vectors read and compared at once: a chunk's float32 copy is CHUNK * dim * 4 bytes (4 MB at
# the default's 512 dimensions), whatever the number of rows scanned.
CHUNK = 2048


def enabled() -> bool:
    return embedder.embedder_name() is not None


class Query:
    """What a scan compares stored vectors with: the embedder's `name` and the query's `vector`.

    From a search's text (query_vector) the vector is computed on first use, so a scan that
    finds no stored vector of that embedder (a new person, with no fact or episode embedded
    yet) never embeds: the default embedder spends 2-3 ms of CPU on one short text, 7-20 ms
    after an idle moment on a small VM. A vector computed elsewhere (a batch of extracted
    facts') is given as `vector`."""

    def __init__(self, name: str, *, text: str = "", vector: np.ndarray | None = None) -> None:
        if vector is None and not text:
            raise ValueError("a Query needs its text or its vector")
        self.name = name
        self.text = text
        self._vector = vector

    @property
    def vector(self) -> np.ndarray:
        if self._vector is None:
            found = embedder.embed([self.text], kind="query")
            if found is None or found.model != self.name:  # switched off or changed since
                raise RuntimeError(f"the embedder {self.name} is no longer the one configured")
            self._vector = found.vectors[0]
        return self._vector


def query_vector(text: str) -> Query | None:
    """The query of a search for `text`, None when the embedder is off or the text is blank.
    Its vector is computed when a scan first needs it (Query)."""
    name = embedder.embedder_name()
    if name is None or not text.strip():
        return None
    return Query(name, text=text)


@dataclass(frozen=True)
class Scan:
    """The cosines of the scanned rows with the query: `ids` and `cosines` aligned, plus the
    normalisation of fuse (the median and the best cosine)."""

    ids: np.ndarray
    cosines: np.ndarray

    @property
    def empty(self) -> bool:
        return len(self.ids) == 0

    def normalised(self, keys: Iterable[Any]) -> dict[Any, float]:
        """meaning(d) of the scanned rows among `keys` (a fusion's candidates: a few hundred of
        the 100,000 rows a scan may hold, so no mapping of them all is built)."""
        wanted = list(keys)
        if self.empty or not wanted:
            return {}
        floor = float(np.median(self.cosines))
        span = float(self.cosines.max()) - floor
        if span <= 1e-9:
            return {}
        among = np.isin(self.ids, np.asarray(wanted))
        values = np.clip((self.cosines[among] - floor) / span, 0.0, 1.0)
        return dict(zip(self.ids[among].tolist(), values.tolist(), strict=True))

    def best(self, count: int) -> list[Any]:
        """The ids of the `count` nearest rows, nearest first."""
        if self.empty or count <= 0:
            return []
        count = min(count, len(self.ids))
        top = np.argpartition(-self.cosines, count - 1)[:count]
        top = top[np.argsort(-self.cosines[top], kind="stable")]
        return self.ids[top].tolist()


def nearest(rows: QuerySet, query: Query, *, cap: int | None = None) -> Scan:
    """The cosines of `rows`' vectors (those of the query's embedder) with the query's, the
    newest TUNING.scan_cap at most, read CHUNK at a time. The query is embedded only when a
    stored vector is found."""
    stored = vectors_newest(
        rows, name=query.name, cap=TUNING.scan_cap if cap is None else cap
    ).iterator(chunk_size=CHUNK)
    return nearest_of(stored, query)


def vectors_newest(rows: QuerySet, *, name: str, cap: int) -> QuerySet:
    """`rows`' (id, vector) of the embedder `name`, the newest `cap`, for nearest_of."""
    return rows.filter(embedding_model=name).order_by("-pk").values_list("pk", "embedding")[:cap]


def nearest_of(stored: Iterable[tuple[Any, bytes]], query: Query) -> Scan:
    """nearest's scan over rows already read: (id, vector) pairs, newest first (a statement
    compiled once, ethan_shared.compiled, reads them CHUNK at a time)."""
    ids: list[Any] = []
    parts: list[np.ndarray] = []
    batch_ids: list[Any] = []
    batch: list[bytes] = []
    size = dim = 0

    def flush() -> None:
        parts.append(embedder.similarities(query.vector, embedder.from_blobs(batch, dim)))
        ids.extend(batch_ids)
        batch_ids.clear()
        batch.clear()

    for pk, blob in stored:
        if not size:  # the first stored vector: now the query's is needed
            dim = len(query.vector)
            size = embedder.blob_size(dim)
        blob = bytes(blob)
        if len(blob) != size:  # written with another dimension under the same name: skip
            continue
        batch_ids.append(pk)
        batch.append(blob)
        if len(batch) >= CHUNK:
            flush()
    if batch:
        flush()
    cosines = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return Scan(ids=np.asarray(ids), cosines=cosines)


# --- the owner's message vectors, held in this process --------------------------------------


@dataclass
class _Session:
    """One session's message vectors, from seq `since` on: ids and seqs, the int8 values and
    each row's norm."""

    version: int | None
    since: int
    ids: np.ndarray
    seqs: np.ndarray
    values: np.ndarray
    norms: np.ndarray


class _Rows:
    """A session's rows as they are read: the blobs joined as they come (one copy, not a
    Python object per vector)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.seqs: list[int] = []
        self.blobs = bytearray()
        self.sizes: list[int] = []

    def add(self, pk: int, seq: int, blob: bytes) -> None:
        self.ids.append(pk)
        self.seqs.append(seq)
        self.blobs += blob
        self.sizes.append(len(blob))


class MessageVectors:
    """One owner's message vectors of one embedder, held in this process (messages_scan).

    Reading 100,000 vectors from the database took about 290 ms on SQLite (the rows are read
    whole), comparing them 8 ms (docs/benchmarks.md, "Memory found by meaning: cost"). So a
    process keeps them: each search first reads the owner's sessions' `vectors_version` (one
    indexed query), then, of the sessions whose count moved, only the rows from the newest it
    holds on (messages_embed writes the new turns and the one before them), and lets go of the
    sessions that are gone. The int8 values are kept as stored (a blob's scale cancels out of
    a cosine): 512 bytes a message with the default embedder.

    Bounded: the owner's newest TUNING.scan_cap messages are held, by session from the most
    recently active, the last one cut to its newest messages (older ones are found by their
    words alone), and all owners together within ETHAN_VECTOR_CACHE_MB (the least recently
    searched let go first)."""

    def __init__(self, owner_id: int, name: str):
        self.owner_id = owner_id
        self.name = name
        self.sessions: dict[str, _Session] = {}
        self.lock = threading.Lock()
        self._joined: tuple | None = None

    @property
    def nbytes(self) -> int:
        return sum(
            p.values.nbytes + p.ids.nbytes + p.seqs.nbytes + p.norms.nbytes
            for p in self.sessions.values()
        )

    def _wanted(self) -> dict[str, tuple[int | None, int, int]]:
        """The sessions to hold: id -> (vectors_version, the first seq held, last_seq)."""
        wanted = {}
        room = TUNING.scan_cap
        newest_first = (
            ChatSession.objects.filter(owner_id=self.owner_id)
            .order_by("-updated_at", "-pk")
            .values_list("pk", "vectors_version", "last_seq")
        )
        for pk, version, last_seq in newest_first.iterator(chunk_size=CHUNK):
            if room <= 0:
                break
            wanted[pk] = (version, max(1, last_seq - room + 1), last_seq)
            room -= last_seq
        return wanted

    def refresh(self) -> None:
        wanted = self._wanted()
        gone = self.sessions.keys() - wanted.keys()
        for pk in gone:
            del self.sessions[pk]
        grown, fresh = {}, {}
        for pk, (version, since, last_seq) in wanted.items():
            held = self.sessions.get(pk)
            if held is not None and (held.version, held.since) == (version, since):
                continue
            tail = int(held.seqs.max()) if held is not None and len(held.seqs) else 0
            if held is not None and held.since == since and tail and tail <= last_seq:
                grown[pk] = (version, tail)  # read again from the newest held row on
            else:
                fresh[pk] = (version, since)
        for pk, (version, tail) in grown.items():
            rows = self._read([pk], since=tail)[pk]
            held = self.sessions[pk]
            kept = held.seqs < tail
            part = self._part(version, held.since, rows)
            if part.values.shape[1] == held.values.shape[1]:
                part = _Session(
                    version,
                    held.since,
                    np.concatenate([held.ids[kept], part.ids]),
                    np.concatenate([held.seqs[kept], part.seqs]),
                    np.concatenate([held.values[kept], part.values]),
                    np.concatenate([held.norms[kept], part.norms]),
                )
            self.sessions[pk] = part
        by_since: dict[int, list[str]] = {}
        for pk, (_version, since) in fresh.items():
            by_since.setdefault(since, []).append(pk)
        for since, ids in by_since.items():
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                read = self._read(batch, since=since)
                for pk in batch:
                    self.sessions[pk] = self._part(fresh[pk][0], since, read[pk])
        if gone or grown or fresh:
            self._joined = None

    def _read(self, session_ids: list[str], *, since: int) -> dict[str, _Rows]:
        rows = {pk: _Rows() for pk in session_ids}
        stored = (
            Message.objects.filter(
                session_id__in=session_ids,
                seq__gte=since,
                embedding_model=self.name,
                role__in=SPOKEN,
            )
            .order_by()
            .values_list("session_id", "pk", "seq", "embedding")
            .iterator(chunk_size=CHUNK)
        )
        for session_id, pk, seq, blob in stored:
            rows[session_id].add(pk, seq, bytes(blob))
        return rows

    def _part(self, version: int | None, since: int, rows: _Rows) -> _Session:
        sizes = Counter(rows.sizes)
        size = sizes.most_common(1)[0][0] if sizes else 0
        dim = max(0, size - embedder.blob_size(0))
        if not dim:
            return _Session(
                version,
                since,
                np.zeros(0, np.int64),
                np.zeros(0, np.int32),
                np.zeros((0, 0), np.int8),
                np.zeros(0, np.float32),
            )
        sizes_seen = np.asarray(rows.sizes)
        if len(sizes) == 1:
            raw = np.frombuffer(rows.blobs, dtype=np.uint8).reshape(len(rows.ids), size)
            keep = slice(None)
        else:  # a blob of another size under the same name: never compared
            ends = np.cumsum(sizes_seen)
            keep = sizes_seen == size
            raw = np.stack(
                [
                    np.frombuffer(rows.blobs, dtype=np.uint8, count=size, offset=int(end - size))
                    for end in ends[keep]
                ]
            )
        values = raw[:, size - dim :].view(np.int8).copy()
        norms = np.empty(len(values), dtype=np.float32)
        for start in range(0, len(values), CHUNK):  # a chunk at a time: no float32 copy of all
            chunk = values[start : start + CHUNK].astype(np.float32)
            norms[start : start + CHUNK] = np.linalg.norm(chunk, axis=1)
        return _Session(
            version,
            since,
            np.asarray(rows.ids, dtype=np.int64)[keep],
            np.asarray(rows.seqs, dtype=np.int32)[keep],
            values,
            norms,
        )

    def joined(self) -> tuple:
        """(ids, seqs, session of each row as an index into `order`, values, norms, order)."""
        if self._joined is None:
            dims = Counter(part.values.shape[1] for part in self.sessions.values() if len(part.ids))
            dim = dims.most_common(1)[0][0] if dims else 0
            order = [
                pk
                for pk, part in self.sessions.items()
                if len(part.ids) and part.values.shape[1] == dim
            ]
            parts = [self.sessions[pk] for pk in order]
            if not parts:
                self._joined = (
                    np.zeros(0, np.int64),
                    np.zeros(0, np.int32),
                    np.zeros(0, np.int32),
                    np.zeros((0, 0), np.int8),
                    np.zeros(0, np.float32),
                    order,
                )
            else:
                self._joined = (
                    np.concatenate([p.ids for p in parts]),
                    np.concatenate([p.seqs for p in parts]),
                    np.repeat(np.arange(len(parts), dtype=np.int32), [len(p.ids) for p in parts]),
                    np.concatenate([p.values for p in parts]),
                    np.concatenate([p.norms for p in parts]),
                    order,
                )
        return self._joined

    def scan(
        self,
        query: Query,
        *,
        session_id: str | None = None,
        exclude_after: tuple[str, int] | None = None,
    ) -> Scan:
        ids, seqs, owners, values, norms, order = self.joined()
        if not len(ids) or values.shape[1] != len(query.vector):
            return Scan(ids=np.zeros(0, np.int64), cosines=np.zeros(0, np.float32))
        keep = np.ones(len(ids), dtype=bool)
        if session_id is not None:
            keep &= owners == (order.index(session_id) if session_id in order else -1)
        if exclude_after is not None and exclude_after[0] in order:
            current = order.index(exclude_after[0])
            keep &= ~((owners == current) & (seqs >= exclude_after[1]))
        vector = np.asarray(query.vector, dtype=np.float32)
        vector = vector / (np.linalg.norm(vector) or 1.0)
        cosines = np.empty(len(ids), dtype=np.float32)
        for start in range(0, len(ids), CHUNK):
            cosines[start : start + CHUNK] = (
                values[start : start + CHUNK].astype(np.float32) @ vector
            )
        cosines /= np.where(norms > 0, norms, 1.0)
        if not keep.all():
            return Scan(ids=ids[keep], cosines=cosines[keep])
        return Scan(ids=ids, cosines=cosines)


_held: OrderedDict[tuple[int, str], MessageVectors] = OrderedDict()
_held_lock = threading.Lock()


def messages_scan(
    owner_id: int,
    query: Query,
    *,
    session_id: str | None = None,
    exclude_after: tuple[str, int] | None = None,
) -> Scan:
    """The cosines of the owner's message vectors (the embedder's that made the query) with the
    query, from the vectors this process holds (MessageVectors), brought up to date first."""
    key = (owner_id, query.name)
    with _held_lock:
        held = _held.get(key)
        if held is None:
            held = _held[key] = MessageVectors(owner_id, query.name)
        _held.move_to_end(key)
    with held.lock:
        held.refresh()
        found = held.scan(query, session_id=session_id, exclude_after=exclude_after)
    with _held_lock:
        budget = settings.ETHAN_VECTOR_CACHE_MB * 1024 * 1024
        while len(_held) > 1 and sum(h.nbytes for h in _held.values()) > budget:
            _held.popitem(last=False)  # the least recently searched owner
    return found


def messages_forget() -> None:
    """Let go of every owner's held vectors (tests, and a process that wants the memory)."""
    with _held_lock:
        _held.clear()


@dataclass(frozen=True)
class Fused:
    key: Hashable
    score: float


def fuse(
    lexical: Sequence[tuple[Hashable, float]],
    scan: Scan,
    *,
    weight: float | None = None,
    candidates: int | None = None,
) -> list[Fused]:
    """BM25's ranking (key, score), best first, fused with the scan's over the union of BM25's
    candidates and the scan's best `candidates`: the weighted sum of the module's docstring,
    best first (ties keep BM25's order, then the scan's)."""
    weight = TUNING.weight if weight is None else weight
    candidates = TUNING.candidates if candidates is None else candidates
    nearest_keys = scan.best(candidates)
    meaning = scan.normalised([key for key, _score in lexical] + nearest_keys)
    best = lexical[0][1] if lexical else 0.0
    scores: dict[Hashable, float] = {}
    for key, score in lexical:
        words = score / best if best > 0 else 0.0
        scores[key] = (1 - weight) * words + weight * meaning.get(key, 0.0)
    for key in nearest_keys:
        if key not in scores:
            scores[key] = weight * meaning.get(key, 0.0)
    fused = [Fused(key, score) for key, score in scores.items()]
    fused.sort(key=lambda item: -item.score)  # stable: BM25's order, then the scan's
    return fused


def fused_rows(ranked: list, scan: Scan, rows: QuerySet, *, limit: int) -> list:
    """BM25's Ranked model instances fused with the scan's (fuse), as Ranked instances again,
    best first; the scan's own candidates among the best `limit` are read from `rows`."""
    fused = fuse([(r.item.pk, r.score) for r in ranked], scan)[: max(limit, 1) * 2]
    items = {r.item.pk: r.item for r in ranked}
    missing = [item.key for item in fused if item.key not in items]
    if missing:
        items.update(rows.in_bulk(missing))
    return [Ranked(item=items[item.key], score=item.score) for item in fused if item.key in items]


# --- writing vectors (the background: agent_app.vectors) -----------------------------------


def vectors_of(texts: Sequence[str]) -> tuple[str, np.ndarray] | None:
    """(embedder name, one document vector per text), None when the embedder is off."""
    found = embedder.embed(list(texts), kind="document")
    if found is None:
        return None
    return found.model, found.vectors


def combined(own: np.ndarray, neighbours: Iterable[np.ndarray]) -> np.ndarray:
    """A message's vector: its own text's plus its neighbours', each TUNING.context_weight, as
    one unit vector."""
    total = np.array(own, dtype=np.float32)
    for vector in neighbours:
        total = total + TUNING.context_weight * vector
    return embedder.normalise(total)


# A row's vector and the name of the embedder that made it.
_VECTOR_FIELDS = ("embedding", "embedding_model")


def rows_write(
    model: type,
    vectors: dict[Any, np.ndarray],
    name: str,
    *,
    unchanged: dict[Any, dict[str, Any]] | None = None,
) -> int:
    """Store `vectors` (pk -> vector) on `model`'s rows with the embedder's name. With
    `unchanged` (pk -> the field values the text was read with) a row is written only if they
    still hold: a fact edited while its old words were being embedded keeps no stale vector
    (the edit cleared it; the next pass embeds the new words). Rows whose text never changes
    (messages) are written in one statement run for each. Returns how many rows were
    written."""
    if not vectors:
        return 0
    if unchanged is None:
        # One UPDATE by primary key, run for every row (a row deleted meanwhile matches
        # nothing): bulk_update's single statement of CASE branches, one a row, took the
        # process longer to build than the database to run.
        meta, quoted = model._meta, connection.ops.quote_name
        blob, embedder_column = (quoted(meta.get_field(f).column) for f in _VECTOR_FIELDS)
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {quoted(meta.db_table)} SET {blob} = %s, {embedder_column} = %s "
                f"WHERE {quoted(meta.pk.column)} = %s",
                [(embedder.to_blob(vector), name, pk) for pk, vector in vectors.items()],
            )
            return cursor.rowcount
    written = 0
    for pk, vector in vectors.items():
        written += model.objects.filter(pk=pk, **unchanged.get(pk, {})).update(
            embedding=embedder.to_blob(vector), embedding_model=name
        )
    return written


def pending_embed(
    rows: QuerySet, fields: Sequence[str], text_of: Callable[..., str], *, limit: int
) -> int:
    """Write the vectors of `rows` (in their order) that have none of the configured embedder's,
    at most `limit`; each row's text is text_of(*its `fields`). A row whose first field changed
    since it was read (a fact edited, an episode rewritten) is left for the next pass
    (rows_write). How many were written; 0 when the embedder is off or nothing is pending."""
    name = embedder.embedder_name()
    if name is None:
        return 0
    read = list(pending(rows, name).values_list("pk", *fields)[:limit])
    found = vectors_of([text_of(*row[1:]) for row in read]) if read else None
    if found is None:
        return 0
    name, vectors = found
    return rows_write(
        rows.model,
        {row[0]: vectors[at] for at, row in enumerate(read)},
        name,
        unchanged={row[0]: {fields[0]: row[1]} for row in read},
    )


def pending(rows: QuerySet, name: str) -> QuerySet:
    """The rows of `rows` with no vector of the embedder `name` (none yet, or another's)."""
    return rows.filter(Q(embedding_model__isnull=True) | ~Q(embedding_model=name))
