"""`embed()`: texts in, one L2-normalised float32 vector per text out, from the configured
embedder, batched and retried with ethan_llm's one retry policy."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from embedder import config, local, providers
from embedder.config import LOCAL, Choice
from embedder.types import Embeddings, Kind
from embedder.vectors import normalise
from ethan_llm import config as llm_config
from ethan_llm.errors import ModelOutputError
from ethan_llm.retry import Retrying
from ethan_llm.routing import GEMINI, OPENAI

# Characters of one text sent to a provider; the rest is cut (gemini-embedding-001 reads 2,048
# tokens at most, OpenAI's 8,192; a Chinese character can be a token or two).
PROVIDER_MAX_CHARS = 2000

log = logging.getLogger(__name__)

_CALLS: dict[str, Callable[[Choice, Sequence[str], Kind], np.ndarray]] = {
    OPENAI: providers.embed_openai,
    GEMINI: providers.embed_gemini,
}


def embedder_name() -> str | None:
    """The stable name of the configured embedder ("use-multilingual-v3"), None when off.
    Stored with each vector; a vector of another name is never compared."""
    choice = config.configured()
    return choice.name if choice else None


def embed(texts: Sequence[str], *, kind: Kind = "document") -> Embeddings | None:
    """The vectors of `texts` (one row each, in order), or None when the embedder is off.

    `kind` is "query" for a search's own text, "document" for what is searched. Raises ethan_llm's
    typed errors: ModelConfigError (an unknown embedder, a missing key), ModelAuthError,
    ModelRequestError, ModelUnavailable (after the retries), ModelOutputError (an answer with
    the wrong number of vectors). Blocking: call it from a thread, not the event loop.
    """
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not one str")
    texts = list(texts)
    if not all(isinstance(text, str) for text in texts):
        raise TypeError("embed() takes texts (str) only")
    if kind not in ("query", "document"):
        raise ValueError(f"kind must be 'query' or 'document', not {kind!r}")
    choice = config.configured()
    if choice is None:
        return None
    if not texts:
        return _computed(choice, texts, kind)
    keys = [REMEMBERED.key(choice, kind, text) for text in texts]
    rows = REMEMBERED.recall(keys)
    missing = [at for at, row in enumerate(rows) if row is None]
    if missing:
        found = _computed(choice, [texts[at] for at in missing], kind)
        REMEMBERED.keep([keys[at] for at in missing], found.vectors)
        for at, row in zip(missing, found.vectors, strict=True):
            rows[at] = row
    return Embeddings(model=choice.name, dim=rows[0].shape[0], vectors=np.stack(rows))


def forget() -> None:
    """Let go of the vectors this process remembers (tests, benches measuring the call)."""
    REMEMBERED.clear()


class Remembered:
    """The vectors of the texts this process embedded last, at most `size` of them, keyed by
    the model's name, the kind as that model reads it, and a digest of the text.

    The same texts come back: a session's last two messages are embedded again at its next
    turn, since their vectors carry the next message's text (sessions_app.meaning.combined),
    and a turn's query is scanned against facts, episodes and messages, on whichever thread
    each search runs. The default embedder spends about 1 ms of CPU on a short text in a batch
    and 4-5 ms on a reply of a few sentences; a provider charges for each. Remembered, a later
    turn of a conversation embeds its two new messages instead of four, and a query once. Only
    a model that embeds a query apart from a document (Gemini's task types) keeps the two kinds
    apart."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._vectors: OrderedDict[Hashable, np.ndarray] = OrderedDict()

    @staticmethod
    def key(choice: Choice, kind: Kind, text: str) -> Hashable:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
        return choice.name, kind if choice.provider in ASYMMETRIC else "", digest.digest()

    def recall(self, keys: Sequence[Hashable]) -> list[np.ndarray | None]:
        """The vector of each key, None where it is not remembered."""
        with self._lock:
            rows = [self._vectors.get(key) for key in keys]
            for key, row in zip(keys, rows, strict=True):
                if row is not None:
                    self._vectors.move_to_end(key)
        return rows

    def keep(self, keys: Sequence[Hashable], vectors: np.ndarray) -> None:
        with self._lock:
            for key, row in zip(keys, vectors, strict=True):
                # A copy: a row of the call's matrix would keep the whole matrix alive.
                self._vectors[key] = row.copy()
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()


# The providers whose query vectors differ from their document vectors for the same text.
ASYMMETRIC = frozenset({GEMINI})
# 4,096 vectors: 8 MB with the default embedder (512 float32), 25 MB at 1,536 dimensions. A
# process answering more conversations at once than half that remembers fewer of them.
REMEMBERED = Remembered(4096)


def _computed(choice: Choice, texts: list[str], kind: Kind) -> Embeddings:
    if choice.provider == LOCAL:
        return Embeddings(model=choice.name, dim=local.DIM, vectors=local.embed(texts))
    return _from_provider(choice, texts, kind)


def preload() -> str | None:
    """Load the default embedder's weights now if it is the one configured (2.5 s); the name
    of what was loaded, else None. Providers need nothing loaded."""
    choice = config.configured()
    if choice is None or choice.provider != LOCAL:
        return None
    local.load()
    return choice.name


def preload_in_background() -> None:
    """preload() in a thread of its own, for a server or the console starting: the first turn
    then finds the weights loaded (or waits for the rest of the load, under local's lock,
    instead of all of it), and nothing waits for them at start. A failure is logged; the
    first use tries again."""

    def load() -> None:
        try:
            preload()
        except Exception as exc:  # never take the process down for an optional warm-up
            log.warning("the embedder was not loaded ahead of the first search: %s", exc)

    threading.Thread(target=load, name="embedder-preload", daemon=True).start()


def _from_provider(choice: Choice, texts: list[str], kind: Kind) -> Embeddings:
    settings = config.current()
    size = settings.openai_batch if choice.provider == OPENAI else settings.gemini_batch
    call = _CALLS[choice.provider]
    # An empty input is refused by OpenAI's API; a space embeds as nearly nothing, as "" would.
    sent = [text[:PROVIDER_MAX_CHARS] or " " for text in texts]
    parts = [
        _with_retries(lambda batch=sent[i : i + size]: call(choice, batch, kind), choice)
        for i in range(0, len(sent), size)
    ]
    if not parts:
        return Embeddings(model=choice.name, dim=0, vectors=np.zeros((0, 0), np.float32))
    if len({part.shape[1] for part in parts}) > 1:
        raise ModelOutputError(f"{choice.name}: batches came back with different dimensions")
    vectors = normalise(np.concatenate(parts) if len(parts) > 1 else parts[0])
    return Embeddings(model=choice.name, dim=vectors.shape[1], vectors=vectors)


def _with_retries(attempt: Callable[[], np.ndarray], choice: Choice) -> np.ndarray:
    """ethan_llm's retry rule around one request: transient failures (429, 5xx, timeouts) are tried
    again after its backoff, the others raised at once, all typed."""
    settings = llm_config.current()
    translate = providers.translator(choice.provider)
    retrying = Retrying(
        translate=lambda exc: translate(exc, choice.name),
        retries=settings.retries,
        base=settings.backoff_base,
        cap=settings.backoff_cap,
        label=f"embedder {choice.name}",
    )
    while True:
        try:
            return attempt()
        except Exception as exc:
            delay = retrying.delay_after(exc, delivered=False)
        time.sleep(delay)
