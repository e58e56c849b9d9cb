"""导入 in Chromium: Ada uploads her ChatGPT export on the memory page, watches its progress
(the page polls its run), then finds the conversations among her sessions and what Ethan
learnt from them among her facts; a broken file shows its one line."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from memory_app.models import Fact
from sessions_app.models import ChatSession, ImportRun
from tests.browser.test_memory_page import PASSWORD, log_in, photograph, text
from tests.browser.test_profile_page import click_and_wait_for_the_next_page
from tests.imports.exports import ChatGPT


@pytest.fixture
def ada(db, settings):
    # The upload's task runs in the server's process once the answer is sent (embedded), as a
    # laptop runs it; with a broker a worker would (tests/imports covers the task itself).
    settings.ETHAN_EMBEDDED = True
    settings.ETHAN_MODEL = "offline"
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def finished(row_id: str):
    def check(browser) -> bool:
        return browser.find_element(By.ID, row_id).get_attribute("data-finished") == "1"

    return check


@pytest.mark.django_db(transaction=True)
def test_upload_a_chatgpt_export_and_watch_it_learnt(browser, live_server, tmp_path, ada):
    chats = [
        ChatGPT(f"c-{n}", f"Chat {n}").exchange((f"I like tea number {n}", "Noted."))
        for n in range(40)
    ]
    chats.append(ChatGPT("c-home", "Home").exchange(("I live in Lisbon", "Lovely city.")))
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps([chat.export() for chat in chats]))

    log_in(browser, live_server, "/memory/sessions/")
    click_and_wait_for_the_next_page(browser, "import-link")
    Select(browser.find_element(By.ID, "import-source")).select_by_value("chatgpt")
    browser.find_element(By.ID, "import-file").send_keys(str(export))
    assert browser.find_element(By.ID, "import-learn").is_selected()
    click_and_wait_for_the_next_page(browser, "import-submit")
    # The run's own row says how it goes; no banner beside it (it said "Importing…" above a
    # run that had failed).
    assert not browser.find_elements(By.CSS_SELECTOR, "ul.messages")

    run = ImportRun.objects.get(owner=ada)
    row_id = f"import-{run.pk}"
    WebDriverWait(browser, 60).until(finished(row_id))
    row = browser.find_element(By.ID, row_id)
    assert row.find_element(By.CLASS_NAME, "status").text == "done"
    assert row.find_element(By.CLASS_NAME, "read-count").text == "41/41"
    assert row.find_element(By.CLASS_NAME, "learn-count").text == "41/41"
    read = row.find_element(By.CSS_SELECTOR, "progress.read")
    assert read.get_attribute("value") == read.get_attribute("max") == "41"
    assert "41 new sessions, 82 messages" in row.text
    photograph(browser, tmp_path, "import")

    assert ChatSession.objects.filter(owner=ada, channel="import").count() == 41
    lisbon = Fact.objects.get(owner=ada, content__icontains="Lisbon")
    browser.get(f"{live_server.url}/memory/facts/{lisbon.pk}/")
    assert "I live in Lisbon" in text(browser)


@pytest.mark.django_db(transaction=True)
def test_a_broken_upload_shows_its_line(browser, live_server, tmp_path, ada):
    broken = tmp_path / "conversations.json"
    broken.write_text('[{"title": "x", "mapping": ')
    log_in(browser, live_server, "/memory/import/")
    browser.find_element(By.ID, "import-file").send_keys(str(broken))
    click_and_wait_for_the_next_page(browser, "import-submit")
    run = ImportRun.objects.get(owner=ada)
    WebDriverWait(browser, 60).until(finished(f"import-{run.pk}"))
    row = browser.find_element(By.ID, f"import-{run.pk}")
    assert row.find_element(By.CLASS_NAME, "status").text == "failed"
    assert row.find_element(By.CLASS_NAME, "run-error").text == (
        "conversations.json: broken JSON in conversation 1 (parse error: premature EOF)"
    )
    assert not browser.find_elements(By.CSS_SELECTOR, "ul.messages")
    assert not ChatSession.objects.filter(owner=ada).exists()
    # The help it names is on the page, opened by its link.
    browser.find_element(By.ID, "import-help-link").click()
    help_text = browser.find_element(By.ID, "import-help")
    browser.find_element(By.CSS_SELECTOR, "#import-help summary").click()
    assert "Settings → Data controls → Export data" in help_text.text
