"""The admin's sign-in form in Chromium, filled until it is refused: the sign-in throttle
(ethan_site.signin) counted in the services suite's shared cache (Redis)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PASSWORD = "a-long-pass-phrase"


def submit_admin_sign_in(browser, username: str, password: str) -> str:
    """Fill the admin's form and send it as a person does; the text of the page that answers."""
    # The old page is marked, and the answer is the first complete page without the mark.
    # (Chromedriver can report the old page's node gone as a generic inspector error rather
    # than a stale element, so staleness_of is not used; errors while the page swaps are
    # retried.)
    browser.execute_script("window.ethanOldPage = true")
    browser.find_element(By.ID, "id_username").clear()
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "#login-form input[type=submit]").click()
    wait = WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,))
    wait.until(
        lambda b: b.execute_script(
            "return window.ethanOldPage === undefined && document.readyState === 'complete'"
        )
    )
    return browser.find_element(By.TAG_NAME, "body").text


@pytest.mark.django_db(transaction=True)
def test_admin_sign_in_in_chromium_is_refused_after_ten_wrong_passwords(
    browser, live_server, sign_in_clock
):
    get_user_model().objects.create_superuser("ada", password=PASSWORD)
    browser.get(f"{live_server.url}/admin/login/")
    answers = [submit_admin_sign_in(browser, "ada", f"guess-{i}") for i in range(11)]
    assert all("Please enter the correct username and password" in a for a in answers[:10])
    assert "Too many attempts: try again in 60 seconds." in answers[10]

    # The right password is refused too: it is not checked.
    refused = submit_admin_sign_in(browser, "ada", PASSWORD)
    assert "Too many attempts" in refused
    assert browser.current_url.startswith(f"{live_server.url}/admin/login/")
    browser.get(f"{live_server.url}/admin/")
    assert browser.current_url.startswith(f"{live_server.url}/admin/login/")  # still signed out

    sign_in_clock.now += 60  # the wait is over
    welcome = submit_admin_sign_in(browser, "ada", PASSWORD)
    assert browser.current_url == f"{live_server.url}/admin/"
    assert "Site administration" in welcome
