from __future__ import annotations

import pytest

import embedder
from embedder import config


@pytest.fixture
def embedder_config():
    """Embedder settings a test may change; the previous ones come back afterwards."""
    saved = config.current()
    yield config
    config._settings = saved


@pytest.fixture(scope="session")
def default_embedder():
    """The default embedder with its real weights, loaded once for the whole test session
    (2.5 s): `embed` under the default settings."""
    saved = config.current()
    config.configure(embedder="default")
    embedder.preload()
    config._settings = saved

    def embed(texts, kind="document"):
        before = config.current()
        config.configure(embedder="default")
        try:
            return embedder.embed(texts, kind=kind)
        finally:
            config._settings = before

    return embed
