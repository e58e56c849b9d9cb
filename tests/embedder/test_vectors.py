"""Stored vectors: the int8 blob and its round trip, and the similarities a scan computes."""

from __future__ import annotations

import numpy as np
import pytest

import embedder


def _unit_rows(count: int, dim: int, seed: int = 7) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return embedder.normalise(rows)


def test_blob_round_trip_keeps_the_vector():
    vector = _unit_rows(1, 512)[0]
    blob = embedder.to_blob(vector)
    assert isinstance(blob, bytes) and len(blob) == embedder.blob_size(512) == 516
    back = embedder.from_blob(blob, 512)
    assert back.dtype == np.float32 and back.shape == (512,)
    assert embedder.cosine(vector, back) > 0.9999
    assert np.abs(back - vector).max() <= np.abs(vector).max() / 254 + 1e-7


def test_blobs_read_at_once_equal_each_read_alone():
    rows = _unit_rows(50, 64)
    blobs = [embedder.to_blob(row) for row in rows]
    matrix = embedder.from_blobs(blobs, 64)
    assert matrix.shape == (50, 64) and matrix.dtype == np.float32
    assert np.array_equal(matrix[17], embedder.from_blob(blobs[17], 64))
    assert embedder.from_blobs([], 64).shape == (0, 64)


def test_blob_ranks_as_float32_does():
    rows = _unit_rows(2000, 512, seed=3)
    query = _unit_rows(1, 512, seed=4)[0]
    exact = embedder.similarities(query, rows)
    stored = embedder.similarities(
        query, embedder.from_blobs([embedder.to_blob(r) for r in rows], 512)
    )
    assert np.abs(exact - stored).max() < 0.005
    assert set(np.argsort(-exact)[:10]) == set(np.argsort(-stored)[:10])


def test_a_blob_of_the_wrong_size_or_a_bad_vector_is_refused():
    blob = embedder.to_blob(_unit_rows(1, 512)[0])
    with pytest.raises(ValueError, match="516-byte blob is not a 384-dim vector"):
        embedder.from_blob(blob, 384)
    with pytest.raises(ValueError, match="3-byte blob"):
        embedder.from_blobs([blob, b"abc"], 512)
    with pytest.raises(ValueError, match="NaN"):
        embedder.to_blob(np.array([0.5, np.nan], dtype=np.float32))
    zero = embedder.from_blob(embedder.to_blob(np.zeros(8, dtype=np.float32)), 8)
    assert not zero.any()


def test_similarities_are_cosines_whatever_the_norms():
    query = np.array([3.0, 4.0], dtype=np.float32)
    matrix = np.array([[6.0, 8.0], [-4.0, 3.0], [0.0, 0.0], [0.0, -2.0]], dtype=np.float32)
    assert np.allclose(embedder.similarities(query, matrix), [1.0, 0.0, 0.0, -0.8])
    assert embedder.similarities(query, np.zeros((0, 2), np.float32)).shape == (0,)
    assert embedder.cosine(query, matrix[3]) == pytest.approx(-0.8)
    with pytest.raises(ValueError, match="2-dim query against 3-dim"):
        embedder.similarities(query, np.ones((2, 3), np.float32))
