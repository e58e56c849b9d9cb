"""Generated requests against the OpenAPI schema (schemathesis): no answer is a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings

schema = schemathesis.openapi.from_wsgi("/api/schema", get_wsgi_application())


@pytest.fixture
def api_token(db, owner):
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=owner)[0].key


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_server_error(case, api_token, llm_config):
    response = case.call(headers={"Authorization": f"Token {api_token}"})
    assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
