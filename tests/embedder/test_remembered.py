"""The vectors a process remembers (embedder.client.REMEMBERED): a text embedded again costs no
model call, for the same model and, where the model tells them apart, the same kind; the oldest
are let go past the bound; a failed call is not remembered."""

from __future__ import annotations

import numpy as np
import pytest

import embedder
from embedder import client
from embedder.config import Choice
from ethan_llm.errors import ModelUnavailable


@pytest.fixture
def model(monkeypatch):
    """A configured model whose vectors are a function of the text, and the texts it was asked
    to compute, call by call; `fail` makes its next call raise."""

    class Model:
        calls: list[list[str]] = []
        fail = False

        def __call__(self, choice, texts, kind):
            if self.fail:
                self.fail = False
                raise ModelUnavailable("down")
            self.calls.append(list(texts))
            rows = [np.full(4, float(len(text)) + (kind == "query"), np.float32) for text in texts]
            return embedder.Embeddings(model=choice.name, dim=4, vectors=np.stack(rows))

    fake = Model()
    fake.calls = []
    monkeypatch.setattr(client, "_computed", fake)
    monkeypatch.setattr(
        client.config, "configured", lambda: Choice(provider="local", name="m", wire_model="")
    )
    return fake


def test_a_text_embedded_again_is_not_computed_again(model):
    first = embedder.embed(["bees", "hens"])
    again = embedder.embed(["hens", "a fox", "bees"])
    assert model.calls == [["bees", "hens"], ["a fox"]]
    np.testing.assert_array_equal(again.vectors[0], first.vectors[1])
    np.testing.assert_array_equal(again.vectors[2], first.vectors[0])
    assert again.vectors.shape == (3, 4) and again.model == "m"
    # What a caller does to its rows is not what the next caller gets.
    again.vectors[:] = 0
    assert embedder.embed(["bees"]).vectors[0][0] == 4.0


def test_a_symmetric_model_shares_a_query_and_a_document_an_asymmetric_one_does_not(
    model, monkeypatch
):
    embedder.embed(["bees"], kind="document")
    embedder.embed(["bees"], kind="query")
    assert model.calls == [["bees"]]  # the default embedder reads both alike
    monkeypatch.setattr(
        client.config,
        "configured",
        lambda: Choice(provider="gemini", name="gemini:e", wire_model="e"),
    )
    embedder.embed(["bees"], kind="document")
    embedder.embed(["bees"], kind="query")
    assert model.calls == [["bees"], ["bees"], ["bees"]]


def test_another_model_never_gets_a_remembered_vector(model, monkeypatch):
    embedder.embed(["bees"])
    monkeypatch.setattr(
        client.config, "configured", lambda: Choice(provider="local", name="n", wire_model="")
    )
    assert embedder.embed(["bees"]).model == "n"
    assert model.calls == [["bees"], ["bees"]]


def test_the_oldest_are_let_go_past_the_bound_and_a_failure_is_not_kept(model, monkeypatch):
    monkeypatch.setattr(client, "REMEMBERED", client.Remembered(2))
    embedder.embed(["a", "b"])
    embedder.embed(["a"])  # "a" used again: "b" is now the oldest
    embedder.embed(["c"])
    embedder.embed(["a", "b"])
    assert model.calls == [["a", "b"], ["c"], ["b"]]
    model.fail = True
    with pytest.raises(ModelUnavailable):
        embedder.embed(["d"])
    embedder.embed(["d"])
    assert model.calls[-1] == ["d"]
    embedder.forget()
    embedder.embed(["d"])
    assert model.calls[-1] == ["d"]
