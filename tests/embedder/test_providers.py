"""Provider embeddings through each real SDK (openai, google-genai) against its loopback fake:
batches, the one retry policy, typed errors."""

from __future__ import annotations

import numpy as np
import pytest

import embedder
from ethan_llm.errors import ModelAuthError, ModelConfigError, ModelUnavailable
from tests.fakes.base import hashed_embedding
from tests.fakes.gemini_fake import FakeGemini
from tests.fakes.openai_fake import FakeOpenAI

TEXTS = ["red apples in the garden", "a blue car on the road", "apples red garden", ""]


@pytest.fixture
def openai_fake(llm_config, embedder_config):
    fake = FakeOpenAI()
    llm_config.configure(env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"{fake.url}/v1"})
    embedder_config.configure(embedder="openai:text-embedding-3-small")
    yield fake
    fake.close()


@pytest.fixture
def gemini_fake(llm_config, embedder_config):
    fake = FakeGemini()
    llm_config.configure(env={"GOOGLE_API_KEY": "g-test", "GOOGLE_GEMINI_BASE_URL": fake.url})
    embedder_config.configure(embedder="gemini:gemini-embedding-001")
    yield fake
    fake.close()


def _expected(texts: list[str], dim: int) -> np.ndarray:
    return np.array([hashed_embedding(text or " ", dim) for text in texts], dtype=np.float32)


def test_openai_embeds_through_the_sdk_in_order(openai_fake):
    result = embedder.embed(TEXTS)
    assert (result.model, result.dim) == ("openai:text-embedding-3-small", 64)
    assert np.allclose(result.vectors, _expected(TEXTS, 64), atol=1e-6)
    assert np.allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)
    (request,) = openai_fake.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "text-embedding-3-small"
    assert request.body["encoding_format"] == "float"
    # An empty text is refused by the API: it goes as a space.
    assert request.body["input"] == [*TEXTS[:3], " "]
    scores = embedder.similarities(result.vectors[0], result.vectors)
    assert scores[2] > scores[1]


def test_openai_compatible_server_needs_no_key(llm_config, embedder_config):
    fake = FakeOpenAI()
    try:
        llm_config.configure(env={"OPENAI_BASE_URL": f"{fake.url}/v1"})
        embedder_config.configure(embedder="openai:nomic-embed-text")
        result = embedder.embed(["hello"], kind="query")
        assert result.model == "openai:nomic-embed-text"
        assert fake.requests[0].body["model"] == "nomic-embed-text"
        assert fake.requests[0].headers["authorization"] == "Bearer not-needed"
    finally:
        fake.close()


def test_openai_batches_keep_the_order(openai_fake, embedder_config):
    embedder_config.configure(openai_batch=2)
    texts = [f"text number {n}" for n in range(5)]
    result = embedder.embed(texts)
    assert [len(r.body["input"]) for r in openai_fake.requests] == [2, 2, 1]
    assert np.allclose(result.vectors, _expected(texts, 64), atol=1e-6)


def test_openai_429_is_retried_with_the_retry_policy(openai_fake):
    openai_fake.reply(
        openai_fake.error_body(429, "Rate limit reached"),
        status=429,
        headers={"retry-after": "0.01"},
    )
    result = embedder.embed(["one", "two"])
    assert len(openai_fake.requests) == 2
    assert np.allclose(result.vectors, _expected(["one", "two"], 64), atol=1e-6)


def test_openai_server_errors_outlasting_the_retries_are_unavailable(openai_fake):
    for _ in range(3):
        openai_fake.reply(openai_fake.error_body(503, "overloaded"), status=503)
    with pytest.raises(ModelUnavailable, match="gave up after 3 attempts"):
        embedder.embed(["one"])
    assert len(openai_fake.requests) == 3  # the first attempt and llm_config's 2 retries


def test_openai_401_is_an_auth_error_not_retried(openai_fake):
    openai_fake.reply(openai_fake.error_body(401, "Incorrect API key provided"), status=401)
    with pytest.raises(ModelAuthError, match="OPENAI_API_KEY"):
        embedder.embed(["one"])
    assert len(openai_fake.requests) == 1


def test_a_provider_without_its_key_fails_before_any_request(llm_config, embedder_config):
    llm_config.configure(env={})
    embedder_config.configure(embedder="openai:text-embedding-3-small")
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        embedder.embed(["one"])
    embedder_config.configure(embedder="gemini:gemini-embedding-001")
    with pytest.raises(ModelConfigError, match="GOOGLE_API_KEY or GEMINI_API_KEY"):
        embedder.embed(["one"])


def test_gemini_embeds_through_the_sdk_with_task_types(gemini_fake):
    documents = embedder.embed(TEXTS)
    assert (documents.model, documents.dim) == ("gemini:gemini-embedding-001", 48)
    assert np.allclose(documents.vectors, _expected(TEXTS, 48), atol=1e-6)
    query = embedder.embed(["where are the apples"], kind="query")
    first, second = gemini_fake.requests
    # Every list goes to batchEmbedContents (the SDK's choice on the Gemini API, not Vertex).
    assert first.path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert first.headers["x-goog-api-key"] == "g-test"
    assert [r["taskType"] for r in first.body["requests"]] == ["RETRIEVAL_DOCUMENT"] * 4
    assert [r["content"]["parts"][0]["text"] for r in first.body["requests"]] == [
        *TEXTS[:3],
        " ",
    ]
    assert second.body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    assert query.vectors.shape == (1, 48)


def test_gemini_batches_stay_within_the_api_limit(gemini_fake):
    texts = [f"message {n}" for n in range(150)]
    result = embedder.embed(texts)
    assert [len(r.body["requests"]) for r in gemini_fake.requests] == [100, 50]
    assert np.allclose(result.vectors, _expected(texts, 48), atol=1e-6)


def test_gemini_429_is_retried_and_a_bad_key_is_an_auth_error(gemini_fake):
    gemini_fake.reply(gemini_fake.error_body(429, "Resource has been exhausted"), status=429)
    assert embedder.embed(["one"]).vectors.shape == (1, 48)
    assert len(gemini_fake.requests) == 2
    # Gemini answers a bad key with 400 API_KEY_INVALID, which is the credentials' fault.
    gemini_fake.reply(
        gemini_fake.error_body(400, "API key not valid. Please pass a valid API key."), status=400
    )
    # New texts: "one"'s vector is remembered (embedder.client.REMEMBERED), not asked again.
    with pytest.raises(ModelAuthError, match="GOOGLE_API_KEY"):
        embedder.embed(["two"])
    assert len(gemini_fake.requests) == 3
    gemini_fake.reply(gemini_fake.error_body(401, "unauthenticated"), status=401)
    with pytest.raises(ModelAuthError):
        embedder.embed(["three"])
    assert len(gemini_fake.requests) == 4


def test_the_fakes_refuse_what_the_apis_refuse(openai_fake, gemini_fake):
    """The wire checks the tests above rely on: an empty input, too many at once."""
    import httpx

    refused = httpx.post(
        f"{openai_fake.url}/v1/embeddings",
        json={"model": "text-embedding-3-small", "input": ["ok", ""]},
        headers={"authorization": "Bearer sk-test"},
    )
    assert refused.status_code == 400 and "'$.input' is invalid" in refused.text
    path = f"{gemini_fake.url}/v1beta/models/gemini-embedding-001:batchEmbedContents"
    many = {
        "requests": [
            {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "x"}]}}
        ]
        * 101
    }
    refused = httpx.post(path, json=many, headers={"x-goog-api-key": "g-test"})
    assert refused.status_code == 400 and "at most 100 requests" in refused.text
    single = httpx.post(
        f"{gemini_fake.url}/v1beta/models/gemini-embedding-001:embedContent",
        json={
            "content": {"parts": [{"text": "red apples"}]},
            "taskType": "RETRIEVAL_QUERY",
            "outputDimensionality": 8,
        },
        headers={"x-goog-api-key": "g-test"},
    )
    assert single.json() == {"embedding": {"values": hashed_embedding("red apples", 8)}}
