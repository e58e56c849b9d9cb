"""Vectors compared and stored: cosine similarities, and the compact blob each is kept as.

A stored vector is int8 with one float32 scale (dim + 4 bytes: 516 for the default's 512
dimensions, against 2,048 as float32 and 1,024 as float16). Measured on LoCoMo's first five
conversations with the default embedder (docs/embeddings.md), int8 kept recall@10 of the
evidence as float32 had it, so the half of float16's bytes it saves costs nothing measurable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

_SCALE = np.dtype("<f4")
# One BLAS thread for numpy in this process, set once: a scan's matrix product over 100,000
# vectors took 285 ms with OpenBLAS's threads on this busy 2-core machine and 31 ms with one
# (docs/benchmarks.md, "Memory found by meaning: cost"), and a server scans from several
# threads at once anyway. (The default model's own products are held to one thread per call by
# its package.)
threadpool_limits(limits=1, user_api="blas")


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to L2 norm 1, as float32 (a zero row stays zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def similarities(query: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """The cosine of `query` (dim,) with each row of `matrix` (n, dim): (n,) float32. Rows need
    not be normalised (from_blob's are not quite)."""
    query = normalise(query)
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.size == 0:
        return np.zeros(len(matrix), dtype=np.float32)
    if matrix.shape[-1] != query.shape[-1]:
        raise ValueError(f"a {query.shape[-1]}-dim query against {matrix.shape[-1]}-dim vectors")
    norms = np.linalg.norm(matrix, axis=1)
    return (matrix @ query) / np.where(norms > 0, norms, 1.0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two vectors."""
    return float(similarities(a, np.asarray(b, dtype=np.float32)[None, :])[0])


def blob_size(dim: int) -> int:
    """Bytes of one stored vector of `dim` dimensions."""
    return _SCALE.itemsize + dim


def to_blob(vector: np.ndarray) -> bytes:
    """One vector as int8 values and their float32 scale (little-endian: scale, then values)."""
    values = np.asarray(vector, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(values)):
        raise ValueError("a vector with NaN or infinity cannot be stored")
    peak = float(np.abs(values).max()) if values.size else 0.0
    scale = peak / 127 if peak > 0 else 1.0
    quantised = np.clip(np.rint(values / scale), -127, 127).astype(np.int8)
    return np.asarray(scale, dtype=_SCALE).tobytes() + quantised.tobytes()


def from_blob(blob: bytes, dim: int) -> np.ndarray:
    """The float32 vector (dim,) a blob of to_blob holds."""
    return from_blobs([blob], dim)[0]


def from_blobs(blobs: Sequence[bytes], dim: int) -> np.ndarray:
    """Many blobs at once as one (n, dim) float32 matrix: the scan's fast path (one join and
    one multiplication, no loop per vector)."""
    size = blob_size(dim)
    wrong = set(map(len, blobs)) - {size}
    if wrong:
        raise ValueError(f"a {min(wrong)}-byte blob is not a {dim}-dim vector ({size} bytes)")
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), size)
    scales = raw[:, : _SCALE.itemsize].copy().view(_SCALE)  # (n, 1)
    values = raw[:, _SCALE.itemsize :].view(np.int8).astype(np.float32)
    return values * scales
