import pytest

from agent_app.paths import choose_path


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("你好", "fast"),
        ("谢谢！", "fast"),
        ("好的", "fast"),
        ("嗯嗯", "fast"),
        ("收到。", "fast"),
        ("hi", "fast"),
        ("Thanks!", "fast"),
        ("ok", "fast"),
        ("got it", "fast"),
        ("今天上海天气怎么样？", "medium"),
        ("What's a good name for a cat?", "medium"),
        ("你好，帮我看看这段代码有什么问题", "medium"),
        ("记住我喜欢喝美式咖啡", "full"),
        ("Remember that my sister lives in Lisbon", "full"),
        ("以后回复都用英文", "full"),
        ("From now on, answer in Chinese.", "full"),
        ("我叫张三", "full"),
        ("my name is Ada", "full"),
        ("我的目标是年底上线", "full"),
        ("帮我制定一个三个月的学习计划", "full"),
        ("首先分析需求，然后给出方案", "full"),
        ("Compare Postgres and MySQL for this workload", "full"),
        ("Walk me through it step by step", "full"),
        ("1. set up the repo\n2. write the tests", "full"),
        ("lorem ipsum dolor sit amet " * 30, "full"),
    ],
)
def test_router_in_both_languages(text, path):
    assert choose_path(text=text, mode="work") == path


def test_companion_mode_is_always_full_and_explicit_wins():
    assert choose_path(text="嗯", mode="companion") == "full"
    assert choose_path(text="记住这个", mode="work", explicit="fast") == "fast"
    assert choose_path(text="hi", mode="companion", explicit="medium") == "medium"
    with pytest.raises(ValueError, match="unknown path 'slow'"):
        choose_path(text="hi", mode="work", explicit="slow")
