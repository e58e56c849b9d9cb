"""Embeddings from a provider, through its SDK: OpenAI's `embeddings.create` (which Ollama, vLLM
and llama.cpp also serve, at OPENAI_BASE_URL) and Gemini's `embed_content`.

One attempt each: the retries are ethan_llm's (ethan_llm.retry.Retrying, in embedder.client), so
the SDKs'
own are off, and their exceptions are translated by the chat adapters of the same providers.
The SDKs are imported when an embedder of theirs is first used.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from embedder.config import Choice
from embedder.types import Kind
from ethan_llm import config as llm_config
from ethan_llm.errors import ModelOutputError
from ethan_llm.routing import GEMINI, OPENAI

# Gemini's retrieval task types: a question and the passage that answers it are embedded for
# each other.
GEMINI_TASKS: dict[str, str] = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}


@functools.lru_cache(maxsize=8)
def _openai_client(api_key: str, base_url: str | None, timeout: float):
    import openai

    return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)


@functools.lru_cache(maxsize=8)
def _gemini_client(api_key: str, base_url: str | None, timeout: float):
    from google import genai
    from google.genai import types

    options = types.HttpOptions(timeout=int(timeout * 1000))  # milliseconds
    if base_url:
        options.base_url = base_url
    return genai.Client(api_key=api_key, http_options=options)


def embed_openai(choice: Choice, texts: Sequence[str], kind: Kind) -> np.ndarray:
    """One request to /embeddings. Floats are asked for (the SDK's default is base64, which not
    every compatible server speaks)."""
    settings = llm_config.current()
    client = _openai_client(
        llm_config.api_key(OPENAI, choice.name, settings.env),
        llm_config.base_url(OPENAI, settings.env),
        settings.timeout,
    )
    response = client.embeddings.create(
        model=choice.wire_model, input=list(texts), encoding_format="float"
    )
    rows = sorted(response.data, key=lambda item: item.index)
    return _matrix(choice, [row.embedding for row in rows], len(texts))


def embed_gemini(choice: Choice, texts: Sequence[str], kind: Kind) -> np.ndarray:
    """One batchEmbedContents request (the SDK's embed_content sends every list there)."""
    from google.genai import types

    settings = llm_config.current()
    client = _gemini_client(
        llm_config.api_key(GEMINI, choice.name, settings.env),
        llm_config.base_url(GEMINI, settings.env),
        settings.timeout,
    )
    response = client.models.embed_content(
        model=choice.wire_model,
        contents=list(texts),
        config=types.EmbedContentConfig(task_type=GEMINI_TASKS[kind]),
    )
    return _matrix(choice, [item.values for item in response.embeddings or ()], len(texts))


def translator(provider: str):
    """The translation of the provider's SDK exceptions into ethan_llm's typed errors: its chat
    adapter's, so an embedding fails in the same words as a turn."""
    from ethan_llm.registry import provider_entry

    return provider_entry(provider).chat().translate


def _matrix(choice: Choice, rows: list, expected: int) -> np.ndarray:
    """The rows as float32, checked: one vector per text, all of one length."""
    if len(rows) != expected or any(not row for row in rows):
        raise ModelOutputError(
            f"{choice.name}: {len(rows)} embeddings came back for {expected} texts"
        )
    try:
        return np.asarray(rows, dtype=np.float32)
    except ValueError:  # rows of different lengths
        raise ModelOutputError(
            f"{choice.name}: embeddings of different lengths in one answer"
        ) from None
