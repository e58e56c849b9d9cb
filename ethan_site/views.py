"""The sign-in page, throttled: password guessing is limited like the API is."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from ethan_site.throttles import LoginThrottle


class LoginView(auth_views.LoginView):
    """Django's LoginView; each address may POST ETHAN_LOGIN_RATE attempts (shared cache, so
    across every web process). Past it, the form answers 429 and checks no password."""

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        throttle = LoginThrottle()
        if not throttle.allow_request(request, self):
            wait = throttle.wait() or 60
            seconds = int(wait) + 1
            # An unbound form: a bound one would check the password when rendered.
            form = self.get_form_class()(request=request)
            response = self.render_to_response(
                self.get_context_data(form=form, throttled=seconds), status=429
            )
            response["Retry-After"] = str(seconds)
            return response
        return super().post(request, *args, **kwargs)
