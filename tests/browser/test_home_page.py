"""The home page in Chromium: a visitor is sent to sign in, lands on the home page with their
own token and the URLs to give a chat app and an MCP host, and follows 我的记忆 from there.
Photographed as docs/home-page.png (ETHAN_SCREENSHOTS=1)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from memory_app import services
from tests.browser.test_memory_page import PASSWORD, log_in, photograph
from tests.browser.test_profile_page import click_and_wait_for_the_next_page


@pytest.mark.django_db(transaction=True)
def test_sign_in_lands_on_the_home_page_and_its_links_lead_on(browser, live_server, tmp_path):
    users = get_user_model().objects
    ada = users.create_user("ada", password=PASSWORD)
    grace = users.create_user("grace", password=PASSWORD)
    services.fact_write(
        owner=ada, content="Ada 住在波尔图", category="knowledge", confidence=0.8, source="api"
    )

    log_in(browser, live_server, "/")  # sent to sign in, and back to / after

    token = Token.objects.get(user=ada).key
    assert browser.find_element(By.ID, "token").text == token
    assert browser.find_element(By.ID, "chat-base-url").text == f"{live_server.url}/v1"
    assert browser.find_element(By.ID, "signed-in").text.startswith("已登录 / Signed in as ada")
    assert not Token.objects.filter(user=grace).exists()  # only the signed-in person's is made
    browser.execute_script("window.scrollTo(0, 0)")
    photograph(browser, tmp_path, "page", prefix="home-")

    copy = browser.find_element(By.CSS_SELECTOR, 'button[data-copy="token"]')
    copy.click()
    WebDriverWait(browser, 10).until(lambda _: copy.text == "已复制 / Copied")

    click_and_wait_for_the_next_page(browser, "link-memory")
    assert browser.current_url == f"{live_server.url}/memory/"
    assert "current" in browser.find_element(By.ID, "tab-facts").get_attribute("class")
    assert "Ada 住在波尔图" in browser.find_element(By.TAG_NAME, "main").text

    click_and_wait_for_the_next_page(browser, "home-link")
    assert browser.current_url == f"{live_server.url}/"
