"""user_profile.md round-trips exactly; hand-edited files keep every word."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profile_app.markdown import ProfileParseError, normalize_content, parse, render
from profile_app.sections import SECTIONS

# Any text, including lines that look like Markdown headings, in Chinese and English.
line = st.one_of(
    st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\x00"),
        max_size=40,
    ),
    st.sampled_from(
        [
            "# 用户画像",
            "## 目标与方向",
            "## goals",
            "\\## x",
            "\\\\# y",
            "#",
            "##",
            "### 小标题",
            "- 名字：张三",
            "  - nested",
            "",
            " ",
            "**bold**",
        ]
    ),
)
content = st.lists(line, max_size=6).map(lambda lines: normalize_content("\n".join(lines)))
profiles = st.fixed_dictionaries({section.key: content for section in SECTIONS})


@settings(max_examples=300, deadline=None)
@given(profiles)
def test_render_then_parse_is_exact(contents):
    document = render(contents)
    parsed = parse(document)
    assert parsed.sections == contents
    assert parsed.notes == []
    assert render(parsed.sections) == document


def test_the_rendered_document():
    assert render({"basic": "- 名字：Ada", "goals": "- 年底前上线\n- 跑步"}) == (
        "# 用户画像\n\n## 基础特征\n\n- 名字：Ada\n\n## 身份与背景\n\n## 目标与方向\n\n"
        "- 年底前上线\n- 跑步\n\n## 工作与沟通方式\n\n## 心理与情绪\n\n## 个人语言与激励\n\n"
        "## 与 Agent 的约定\n"
    )


def test_hand_edits_keep_everything_and_say_where_it_went():
    parsed = parse(
        "# My profile\r\nIntro line\r\n\r\n## goals\r\n- ship\r\n## 爱好\r\n- chess\r\n"
        "## 与Agent的约定\r\n- 用中文\r\n"
    )
    assert parsed.sections == {
        "basic": "Intro line",
        "goals": "- ship\n\n**爱好**\n- chess",
        "agreements": "- 用中文",
    }
    assert parsed.notes[:2] == [
        "unknown heading '## 爱好' (line 6): its text was kept at the end of 目标与方向",
        "text before the first section was kept at the start of 基础特征",
    ]
    assert "section 身份与背景 is not in the document: it was left as it is" in parsed.notes


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("## goals\n- a\n## 目标与方向\n- b\n", "section 目标与方向 appears twice (lines 1 and 3)"),
        ("## basic\n" + "x" * 100_001, "at most 100000 are accepted"),
        ("## basic\nnul \x00 here", "NUL character"),
    ],
)
def test_invalid_documents_are_refused(document, message):
    with pytest.raises(ProfileParseError, match=re.escape(message)):
        parse(document)
