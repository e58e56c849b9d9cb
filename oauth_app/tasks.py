"""oauth_app's task: expired OAuth grants and tokens removed, daily (ethan_site.schedule)."""

from oauth2_provider.models import clear_expired

from ethan_shared.queue import ethan_task
from oauth_app.services import used_codes_clear


@ethan_task(name="oauth.clear_expired")
def oauth_clear_expired_task() -> None:
    """django-oauth-toolkit's `cleartokens`: expired access tokens, refresh tokens revoked
    longer ago than REFRESH_TOKEN_EXPIRE_SECONDS, expired grants and ID tokens; and the used
    authorization codes kept as long (oauth_app.models.UsedCode)."""
    clear_expired()
    used_codes_clear()
