"""The consent page and the Connected apps tab in Chromium, with real clicks: a host sends the
person to Ethan; they sign in, see the app named with its domain, untick writing and allow; the
host gets a read-only token; the tab shows the app, what it wrote, and Disconnect ends it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from django.contrib.auth import get_user_model
from oauth2_provider.models import AccessToken, Application
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from memory_app import services as memory_services
from memory_app.models import Fact
from oauth_app import services as oauth_services
from tests.browser.test_profile_page import click_and_wait_for_the_next_page
from tests.mcp_client import free_port
from tests.oauth_app.conftest import pkce

PASSWORD = "a-long-pass-phrase"


@pytest.mark.django_db(transaction=True)
def test_consent_then_connected_apps_in_chromium(browser, live_server):
    ada = get_user_model().objects.create_user("ada", password=PASSWORD)
    site = live_server.url
    # Nothing listens at the host's callback: Chromium shows an error page, the URL is the answer.
    callback = f"http://127.0.0.1:{free_port()}/callback"
    registered = httpx2.post(
        f"{site}/oauth/register/",
        json={"client_name": "Claude", "redirect_uris": [callback]},
    ).json()
    verifier, challenge = pkce()
    authorize = {
        "response_type": "code",
        "client_id": registered["client_id"],
        "redirect_uri": callback,
        "state": "from-the-host",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": "memory.read memory.write",
        "resource": f"{site}/mcp",
    }

    browser.get(f"{site}/oauth/authorize/?{urlencode(authorize)}")
    assert "/accounts/login/" in browser.current_url  # sign in first, on the site's own page
    browser.find_element(By.ID, "id_username").send_keys("ada")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_wait_for_the_next_page(browser, "login")

    assert browser.find_element(By.ID, "client-name").text == "Claude"
    # Where the code goes, with the port a desktop host listens on; no impersonation mark for
    # the loopback interface (its own warning says any program here could listen).
    assert browser.find_element(By.ID, "destination").text == urlsplit(callback).netloc
    assert browser.find_element(By.ID, "loopback-warning").is_displayed()
    assert not browser.find_elements(By.ID, "impersonation-warning")
    write = browser.find_element(By.ID, "id_write")
    assert write.is_selected()
    write.click()  # read only
    browser.find_element(By.ID, "allow").click()
    WebDriverWait(browser, 20).until(expected_conditions.url_contains("/callback"))
    answer = parse_qs(urlsplit(browser.current_url).query)
    assert answer["state"] == ["from-the-host"] and answer["iss"] == [site]

    tokens = httpx2.post(
        f"{site}/oauth/token/",
        data={
            "grant_type": "authorization_code",
            "code": answer["code"][0],
            "redirect_uri": callback,
            "client_id": registered["client_id"],
            "code_verifier": verifier,
            "resource": f"{site}/mcp",
        },
    ).json()
    assert tokens["scope"] == "memory.read"
    memory_services.fact_write(
        owner=ada,
        content="用户住在杭州",
        category="knowledge",
        confidence=0.95,
        source=Fact.Source.MCP,
        source_client="Claude",
    )
    # Counted by client id, as the MCP door counts the memory_write of a client (this one
    # wrote before its person made it read-only, say).
    application = Application.objects.get(client_id=registered["client_id"])
    oauth_services.connection_wrote(owner_id=ada.pk, application_id=application.pk)

    browser.get(f"{site}/memory/apps/")
    [row] = browser.find_elements(By.CSS_SELECTOR, "#apps tbody tr")
    assert row.find_element(By.CLASS_NAME, "app-name").text == "Claude"
    assert "读取 / Read" in row.text and "写入 / Write" not in row.text
    facts_link = row.find_element(By.CSS_SELECTOR, "a[id$='-facts']")
    assert facts_link.text == "1 条记忆 / fact"
    click_and_wait_for_the_next_page(browser, facts_link.get_attribute("id"))
    assert "What Claude wrote" in browser.find_element(By.ID, "client-filter").text
    assert [
        cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#facts tbody td a.text")
    ] == ["用户住在杭州"]

    browser.get(f"{site}/memory/apps/")
    disconnect = browser.find_element(By.CSS_SELECTOR, "button[id^='disconnect-']")
    click_and_wait_for_the_next_page(browser, disconnect.get_attribute("id"))

    assert "Claude is disconnected" in browser.find_element(By.CLASS_NAME, "messages").text
    assert browser.find_elements(By.ID, "empty")
    assert not AccessToken.objects.filter(user=ada).exists()
    assert Fact.objects.get(owner=ada).source_client == "Claude"  # what it wrote stays


@pytest.mark.django_db(transaction=True)
def test_the_consent_page_shows_an_impersonating_name_for_what_it_is_in_chromium(
    browser, live_server
):
    """A client registered as "Claude" (with a right-to-left override and line breaks in the
    name) with claude.ai's callback and its own, asking with its own: the page showed "Connect
    Claude — Claude (says it is claude.ai)", and the name over two lines as "Claude" and
    "Verified by Ethan"."""
    get_user_model().objects.create_user("ada", password=PASSWORD)
    site = live_server.url
    registered = httpx2.post(
        f"{site}/oauth/register/",
        json={
            "client_name": "Claude\u202e\n\nVerified by Ethan",
            "redirect_uris": [
                "https://claude.ai/api/mcp/auth_callback",
                "https://evil.example/cb",
            ],
        },
    ).json()
    _, challenge = pkce()
    authorize = {
        "response_type": "code",
        "client_id": registered["client_id"],
        "redirect_uri": "https://evil.example/cb",
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": "memory.read memory.write",
        "resource": f"{site}/mcp",
    }

    browser.get(f"{site}/oauth/authorize/?{urlencode(authorize)}")
    browser.find_element(By.ID, "id_username").send_keys("ada")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    click_and_wait_for_the_next_page(browser, "login")

    destination = browser.find_element(By.ID, "destination")
    assert destination.text == "evil.example"
    # Prominent: larger than the page's text, and in the card's first line.
    size = float(destination.value_of_css_property("font-size").removesuffix("px"))
    body = float(browser.find_element(By.TAG_NAME, "body").value_of_css_property("font-size")[:-2])
    assert size > body
    name = browser.find_element(By.ID, "client-name")
    assert name.text == "Claude Verified by Ethan"  # one line, no hidden characters
    warning = browser.find_element(By.ID, "impersonation-warning")
    assert warning.is_displayed() and "evil.example is not Claude's" in warning.text
    card = browser.find_element(By.ID, "consent-client").text
    assert "claude.ai" not in card.split(warning.text)[0]  # never shown as its domain
