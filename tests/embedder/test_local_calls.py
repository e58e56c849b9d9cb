"""The default embedder's calls from several threads at once, encoded together
(embedder.local._Calls): each call gets its own texts' vectors, in order, and the calls that
came while one was encoding are encoded in one batch after it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from embedder import local


class _Model:
    """Stands for the encoder: a text's vector is its length, and the first encode waits."""

    def __init__(self):
        self.batches = []
        self.encoding = threading.Event()
        self.go_on = threading.Event()

    def encode(self, texts):
        self.batches.append(list(texts))
        if len(self.batches) == 1:
            self.encoding.set()
            assert self.go_on.wait(10)
        if "boom" in texts:
            raise RuntimeError("the encoder failed")
        return np.array([[len(text), 1.0] for text in texts], dtype=np.float32)


@pytest.fixture
def model(monkeypatch):
    model = _Model()
    monkeypatch.setattr(local, "_loaded", lambda: model)
    monkeypatch.setattr(local, "_CALLS", local._Calls())
    return model


def _in_thread(results, key, texts):
    def run():
        try:
            results[key] = local.embed(texts)
        except RuntimeError as exc:
            results[key] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_calls_that_came_during_an_encode_are_encoded_together_after_it(model):
    results = {}
    first = _in_thread(results, "first", ["a"])
    assert model.encoding.wait(10)
    others = [_in_thread(results, n, ["x" * n, "y" * (n + 10)]) for n in (2, 3, 4)]
    while len(local._CALLS._waiting) < 3:  # all three waiting behind the first
        threading.Event().wait(0.01)
    model.go_on.set()
    for thread in (first, *others):
        thread.join(10)
    assert len(model.batches) == 2 and len(model.batches[1]) == 6
    assert results["first"].tolist() == [[1, 1]]
    for n in (2, 3, 4):
        assert results[n].tolist() == [[n, 1], [n + 10, 1]]


def test_a_call_alone_is_encoded_at_once(model):
    model.go_on.set()
    assert local.embed(["abc"]).tolist() == [[3, 1]]
    assert local.embed(["ab", "c"]).tolist() == [[2, 1], [1, 1]]
    assert model.batches == [["abc"], ["ab", "c"]]


def test_a_failed_encode_is_raised_in_the_threads_of_its_calls_only(model):
    results = {}
    first = _in_thread(results, "first", ["a"])
    assert model.encoding.wait(10)
    failing = _in_thread(results, "failing", ["boom"])
    while len(local._CALLS._waiting) < 1:
        threading.Event().wait(0.01)
    model.go_on.set()
    for thread in (first, failing):
        thread.join(10)
    assert str(results["failing"]) == "the encoder failed"
    assert results["first"].tolist() == [[1, 1]]
    assert local.embed(["ok"]).tolist() == [[2, 1]]  # the next call is not held up
