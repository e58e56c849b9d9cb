"""What an embedding call returns: the vectors, and the name of the model that made them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

# What a text is to the model. Retrieval models that embed a question differently from the
# passage that answers it (Gemini's RETRIEVAL_QUERY / RETRIEVAL_DOCUMENT) are told; the others
# (the default, OpenAI's) embed both alike.
Kind = Literal["query", "document"]


@dataclass(frozen=True, eq=False)
class Embeddings:
    """The vectors of one `embed()` call, one row per text, in the order given."""

    # The stable name of the model ("use-multilingual-v3", "openai:text-embedding-3-small"),
    # stored with each vector: vectors of different names are never compared.
    model: str
    dim: int
    # float32, shape (n, dim), each row of L2 norm 1 (so a dot product is the cosine).
    vectors: np.ndarray

    def __len__(self) -> int:
        return len(self.vectors)
