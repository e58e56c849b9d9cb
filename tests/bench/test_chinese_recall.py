"""The Chinese recall benchmark's reading of DuLeMon's format and its scoring, on two tiny
sessions written here in that format (not DuLeMon's own)."""

from __future__ import annotations

import json

import pytest

from bench import chinese_recall as chinese

SESSIONS = [
    {
        "bot_persona": ["B1: 我 喜欢 爬山", "B2: 我 会 弹 钢琴"],
        "user_said_persona": ["U1: 我 养 了 一 只 橘猫", "U2: 我 在 IT 公司 上班"],
        "user_no_said_persona": ["U3: 我 喜欢 运动"],
        "conversation": [
            "Usr: 小 度 ， 晚上 好",
            "Bot: 晚上 好 ， 你 的 橘猫 最近 怎么样\tU1",
            "Usr: 它 又 胖 了 ， 橘猫 就是 能 吃\tU1",
            "Bot: 周末 一起 去 爬山 吧\tB1",
            "Usr: 好 啊 ， 下午 还 要 去 打 篮球\tU3",
            "Bot: 别 太 累 了",
        ],
    },
    {
        "bot_persona": ["B1: 我 喜欢 看 电影"],
        "user_said_persona": ["U1: 我 叫 小 林"],
        "user_no_said_persona": [],
        "conversation": [
            "Usr:hi ， 小 度",
            "Bot:HI ， 小 林 ， 今天 想 看 什么 电影\tU1 B1",
            "Usr: 看 一 部 老 电影 吧",
            "Bot: 好 的",
        ],
    },
]


def test_segmentation_is_undone_but_latin_words_stay_apart():
    assert chinese.desegment("我 在 IT 部门 工作 了 15 年") == "我在IT部门工作了15年"
    assert chinese.desegment("我 喜欢 听 Pink Floyd 的 歌") == "我喜欢听Pink Floyd的歌"
    assert chinese.desegment(" 晚上 好 ， 小 度 ") == "晚上好，小度"
    assert chinese.split_id("U2: 我 在 IT 公司 上班") == ("U2", "我在IT公司上班")
    assert chinese.parse_turn("Bot:HI ， 小 林\tU1 B1") == ("Bot", "HI，小林", ["U1", "B1"])
    assert chinese.parse_turn("Usr: 看 一 部 老 电影 吧") == ("Usr", "看一部老电影吧", [])


def test_questions_are_the_annotated_persona_sentences(tmp_path):
    path = tmp_path / "sessions.json"
    path.write_text("\n".join(json.dumps(s, ensure_ascii=False) for s in SESSIONS) + "\n")
    sessions = chinese.read_sessions(path)
    found = {(q.session, q.persona): q for q in chinese.questions(sessions)}
    # U2 and the first session's B2 annotate no turn: no question.
    assert sorted(found) == [(0, "B1"), (0, "U1"), (0, "U3"), (1, "B1"), (1, "U1")]
    cat = found[(0, "U1")]
    assert (cat.kind, cat.text, cat.evidence) == ("user", "我养了一只橘猫", ["D1:2", "D1:3"])
    assert cat.shares_word  # 橘猫
    sport = found[(0, "U3")]
    # 运动 against 打篮球: nothing in common but the meaning.
    assert (sport.text, sport.evidence, sport.shares_word) == ("我喜欢运动", ["D1:5"], False)
    assert found[(1, "B1")].kind == "bot" and found[(1, "B1")].evidence == ["D2:2"]


def test_halves_are_the_first_and_second_half_of_the_sessions_in_file_order():
    assert chinese.halves(20) == {"A": range(0, 10), "B": range(10, 20)}
    assert [chinese.half_of(i, 20) for i in (0, 9, 10, 19)] == ["A", "A", "B", "B"]
    assert chinese.halves(5) == {"A": range(0, 3), "B": range(3, 5)}


def test_sessions_become_one_owners_days():
    sample = chinese.as_locomo(SESSIONS)
    conversation = sample["conversation"]
    assert (conversation["speaker_a"], conversation["speaker_b"]) == ("Usr", "Bot")
    assert conversation["session_1_date_time"] == "8:00 pm on 1 March, 2022"
    assert conversation["session_2_date_time"] == "8:00 pm on 2 March, 2022"
    assert conversation["session_2"][1] == {
        "speaker": "Bot",
        "dia_id": "D2:2",
        "text": "HI，小林，今天想看什么电影",
    }


@pytest.fixture
def words_alone():
    """The embedder off for this test (BM25 alone), whatever the suite's default."""
    import embedder

    saved = embedder.current()
    embedder.configure(embedder="off")
    yield
    embedder.configure(embedder=saved.embedder)


@pytest.mark.django_db
def test_memory_search_is_scored_on_the_evidence_turns(llm_config, words_alone):
    scored, loaded, embedder_name = chinese.evaluate(SESSIONS)
    assert embedder_name == "off"
    assert len(loaded.turn_text) == 10
    by_persona = {(s.question.session, s.question.persona): s for s in scored}
    assert {s.half for s in scored} == {"A", "B"}
    # The cat's turns say 橘猫: words alone find both.
    assert by_persona[(0, "U1")].values["search@5"] == 1.0
    table = chinese.summarise(scored)
    assert table["A: all"]["questions"] == 3 and table["B: all"]["questions"] == 2
    assert table["A: no shared word"]["questions"] == 1
    assert "| A: all | 3 |" in chinese.markdown(table)
