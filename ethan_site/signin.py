"""One throttle for every sign-in form: the admin's, the site's and any later one.

Each of them checks a password through django.contrib.auth.authenticate(), which asks the
AUTHENTICATION_BACKENDS in order; SignInThrottleBackend comes first, so every attempt is
counted (ethan_shared.throttles.LoginThrottle) before any backend looks at a password, and one
past the rate stops there. The page then answers 429: SignInThrottleMiddleware shows the form
that was posted again, empty, with the wait.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from ethan_shared.throttles import LoginThrottle, SignInThrottled


class SignInThrottleBackend(BaseBackend):
    """Signs nobody in: counts the attempt, and refuses it past ETHAN_LOGIN_RATE."""

    def authenticate(self, request, username=None, password=None, **credentials):
        # No request: a call from code (a test client's login(), a shell), not a sign-in form.
        if request is not None and username is not None:
            wait = LoginThrottle().wait_after(request, username=username)
            if wait is not None:
                # Not PermissionDenied: authenticate() would take that for a wrong password
                # (a 200 and the form again), where this must end the request as a 429.
                raise SignInThrottled(wait)
        return None

    def get_user(self, user_id):
        # Being first in AUTHENTICATION_BACKENDS, this is the backend Django records for a
        # login(user) or force_login(user) that names none: the user must still be found.
        return ModelBackend().get_user(user_id)


class SignInThrottleMiddleware(MiddlewareMixin):
    """A refused sign-in on a page: the same page's empty form, the wait as a message, 429.
    Sync and async (MiddlewareMixin): under ASGI no request is sent into a thread by it."""

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, SignInThrottled):
            return None
        seconds = int(exc.wait)
        text = (
            f"尝试次数过多，请 {seconds} 秒后再试。"
            f"Too many attempts: try again in {seconds} seconds."
        )
        messages.error(request, text)
        # The view again as a GET: its form unbound (no password checked), `next` kept.
        request.method = "GET"
        match = request.resolver_match
        response = match.func(request, *match.args, **match.kwargs)
        if response.status_code != 200:
            response = HttpResponse(text, status=429, content_type="text/plain; charset=utf-8")
        response.status_code = 429
        response["Retry-After"] = str(seconds)
        return response
