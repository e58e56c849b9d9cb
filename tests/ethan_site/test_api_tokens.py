"""The API's tokens (ethan_shared.authentication): DRF's token authentication with
its person read in one SQL statement. Who a key is, a key nobody has, a person switched off."""

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from ethan_shared.authentication import ApiTokenAuthentication, BearerTokenAuthentication


def client_with(header: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


@pytest.fixture
def keys(owner, other_owner):
    return {
        person.username: Token.objects.create(user=person).key for person in (owner, other_owner)
    }


def test_a_key_is_its_person_on_every_door(keys, owner, other_owner, make_session):
    mine, theirs = make_session(owner, "mine"), make_session(other_owner, "theirs")
    listed = client_with(f"Token {keys['ada']}").get("/api/sessions")
    assert listed.status_code == 200
    assert [row["id"] for row in listed.json()["results"]] == [mine.pk]
    listed = client_with(f"Token {keys['grace']}").get("/api/sessions")
    assert [row["id"] for row in listed.json()["results"]] == [theirs.pk]
    assert client_with(f"Bearer {keys['ada']}").get("/v1/models").status_code == 200


@pytest.mark.parametrize("header", ["Token not-a-key", "Bearer not-a-key"])
def test_a_key_nobody_has_is_refused(keys, header):
    path = "/v1/models" if header.startswith("Bearer") else "/api/sessions"
    answer = client_with(header).get(path)
    assert answer.status_code == 401
    if path == "/v1/models":  # OpenAI's error shape
        assert answer.json()["error"]["code"] == "invalid_api_key"
    else:
        assert answer.json()["detail"] == "Invalid token."


def test_a_person_switched_off_is_refused(keys, owner):
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    answer = client_with(f"Token {keys['ada']}").get("/api/sessions")
    assert answer.status_code == 401
    assert answer.json()["detail"] == "User inactive or deleted."


@pytest.mark.parametrize("authentication", [ApiTokenAuthentication, BearerTokenAuthentication])
def test_one_statement_gives_the_person_and_the_token(
    keys, owner, authentication, django_assert_num_queries
):
    with django_assert_num_queries(1):
        person, token = authentication().authenticate_credentials(keys["ada"])
    assert person == owner and person.username == "ada"
    assert (token.key, token.user) == (keys["ada"], owner)
