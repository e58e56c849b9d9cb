"""我的画像 in Chromium: log in, read, edit, and an invalid document refused with nothing lost."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from selenium.webdriver.common.by import By

from profile_app.models import ProfileSection
from profile_app.selectors import profile_markdown
from profile_app.services import profile_update

DOCS = Path(__file__).resolve().parents[2] / "docs"


def click_and_wait_for_the_next_page(browser, element_id: str) -> None:
    """Click, then wait until the old page is gone and the new one is whole: reading right
    away can find the previous page's elements (and they go stale under the test). On a busy
    machine the element found can still belong to a page being replaced: it is found again
    (the click had not happened, so nothing is sent twice)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    def gone(exc: Exception) -> bool:
        """Chromium says an element's page was replaced in either of two ways."""
        return isinstance(exc, StaleElementReferenceException) or (
            "does not belong to the document" in str(exc)
        )

    def replaced(old):
        def check(_browser) -> bool:
            try:
                old.is_enabled()
            except WebDriverException as exc:
                if gone(exc):
                    return True
                raise
            return False

        return check

    wait = WebDriverWait(browser, 20)
    whole = lambda b: b.execute_script("return document.readyState") == "complete"  # noqa: E731
    for attempt in range(3):
        wait.until(whole)
        old_page = browser.find_element(By.TAG_NAME, "html")
        try:
            wait.until(expected_conditions.element_to_be_clickable((By.ID, element_id))).click()
            break
        except WebDriverException as exc:
            if attempt == 2 or not gone(exc):
                raise
    wait.until(replaced(old_page))
    wait.until(whole)


def set_editor(browser, text: str) -> None:
    browser.execute_script("document.getElementById('markdown').value = arguments[0];", text)


@pytest.mark.django_db(transaction=True)
def test_profile_page_in_chromium(browser, live_server, tmp_path):
    user = get_user_model().objects.create_user("ada", password="a-long-pass-phrase")
    profile_update(owner=user, section="basic", entry="名字：Ada")
    profile_update(owner=user, section="work_style", entry="Prefers short, direct answers")

    browser.get(f"{live_server.url}/profile/")
    assert "/accounts/login/" in browser.current_url  # login required
    browser.find_element(By.ID, "id_username").send_keys("ada")
    browser.find_element(By.ID, "id_password").send_keys("a-long-pass-phrase")
    click_and_wait_for_the_next_page(browser, "login")

    rendered = browser.find_element(By.ID, "rendered")
    headings = [h.text for h in rendered.find_elements(By.TAG_NAME, "h2")]
    assert headings == [  # each with its English beside it, on the page only
        "基础特征 · Basics",
        "身份与背景 · Identity and background",
        "目标与方向 · Goals and direction",
        "工作与沟通方式 · Work and communication",
        "心理与情绪 · Mind and mood",
        "个人语言与激励 · Personal language and motivation",
        "与 Agent 的约定 · Agreements with Ethan",
    ]
    assert "名字：Ada" in rendered.text
    editor = browser.find_element(By.ID, "markdown")
    assert editor.get_attribute("value") == profile_markdown(owner=user)

    edited = profile_markdown(owner=user).replace(
        "## 目标与方向", "## 目标与方向\n\n- 2026 年底前完成独立产品上线\n- 每周跑步三次"
    )
    set_editor(browser, edited)
    click_and_wait_for_the_next_page(browser, "save")
    assert "已保存 / Saved." in browser.find_element(By.CLASS_NAME, "messages").text
    assert "2026 年底前完成独立产品上线" in browser.find_element(By.ID, "rendered").text
    assert ProfileSection.objects.get(owner=user, key="goals").content == (
        "- 2026 年底前完成独立产品上线\n- 每周跑步三次"
    )

    screenshot = tmp_path / "profile-page.png"
    browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
    if os.environ.get("ETHAN_SCREENSHOTS"):  # refresh the copy kept in docs/
        shutil.copy(screenshot, DOCS / "profile-page.png")

    invalid = edited + "\n## goals\n\n- a second goals section\n"
    set_editor(browser, invalid)
    click_and_wait_for_the_next_page(browser, "save")
    error = browser.find_element(By.CLASS_NAME, "messages").text
    assert "没有保存 / Not saved: section 目标与方向 appears twice" in error
    assert browser.find_element(By.ID, "markdown").get_attribute("value") == invalid.replace(
        "\n", "\r\n"
    ).replace("\r\n", "\n")
    assert ProfileSection.objects.get(owner=user, key="goals").content == (
        "- 2026 年底前完成独立产品上线\n- 每周跑步三次"
    )
