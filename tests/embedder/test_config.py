"""Which embedder runs: default, off, a provider's; read from config.yaml and ETHAN_EMBEDDER."""

from __future__ import annotations

import pytest

import embedder
from ethan_llm.errors import ModelConfigError
from tests.conftest import run_manage
from tests.ethan_site.test_config import write_config


def test_parse_names_each_embedder_by_a_stable_name():
    assert embedder.parse("default").name == "use-multilingual-v3"
    assert embedder.parse("").name == "use-multilingual-v3"
    assert embedder.parse(" use-multilingual-v3 ").provider == "local"
    assert embedder.parse("OFF") is None
    openai = embedder.parse("openai:text-embedding-3-small")
    assert (openai.provider, openai.name, openai.wire_model) == (
        "openai",
        "openai:text-embedding-3-small",
        "text-embedding-3-small",
    )
    gemini = embedder.parse("gemini:gemini-embedding-001")
    assert (gemini.provider, gemini.wire_model) == ("gemini", "gemini-embedding-001")
    for wrong in ("text-embedding-3-small", "openai:", "anthropic:voyage-3", "on"):
        with pytest.raises(ModelConfigError, match="unknown embedder"):
            embedder.parse(wrong)


def test_off_gives_no_vectors_and_no_name(embedder_config):
    embedder_config.configure(embedder="off")
    assert embedder.embedder_name() is None
    assert embedder.embed(["anything"]) is None
    assert embedder.embed([], kind="query") is None
    assert embedder.preload() is None


def test_a_changed_embedder_has_another_name(embedder_config):
    names = set()
    for value in (
        "default",
        "openai:text-embedding-3-small",
        "openai:nomic-embed-text",
        "gemini:gemini-embedding-001",
    ):
        embedder_config.configure(embedder=value)
        names.add(embedder.embedder_name())
    assert len(names) == 4


def test_embed_refuses_one_str_and_an_unknown_kind(embedder_config):
    embedder_config.configure(embedder="off")
    with pytest.raises(TypeError, match="not one str"):
        embedder.embed("hello")
    with pytest.raises(TypeError, match="texts \\(str\\) only"):
        embedder.embed(["hello", None])
    with pytest.raises(ValueError, match="kind must be"):
        embedder.embed(["hello"], kind="passage")


SHOW = "import embedder; print(embedder.embedder_name())"


def test_the_setting_comes_from_config_yaml_then_the_environment(tmp_path):
    """End to end through Django's settings, as the server and the console read them."""
    shown = run_manage(["shell", "-v", "0", "-c", SHOW], tmp_path, ETHAN_EMBEDDER=None)
    assert shown.stdout.strip() == "use-multilingual-v3", shown.stderr
    write_config(tmp_path, "embedder: openai:text-embedding-3-small\n")
    shown = run_manage(["shell", "-v", "0", "-c", SHOW], tmp_path, ETHAN_EMBEDDER=None)
    assert shown.stdout.strip() == "openai:text-embedding-3-small", shown.stderr
    shown = run_manage(["shell", "-v", "0", "-c", SHOW], tmp_path, ETHAN_EMBEDDER="off")
    assert shown.stdout.strip() == "None", shown.stderr
    refused = run_manage(["check"], tmp_path, ETHAN_EMBEDDER="bert")
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith(
        "ethan: configuration error: ETHAN_EMBEDDER from environment variable ETHAN_EMBEDDER: "
        "unknown embedder 'bert'"
    )
