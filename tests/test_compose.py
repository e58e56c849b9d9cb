"""docker-compose.yml cannot run here (no Docker engine): check that it points at real things."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from celery import Celery
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ("web", "worker", "beat")
# What an operator puts in .env: the three secrets compose requires.
ENV = {
    "DJANGO_SECRET_KEY": "secret-key-from-env",
    "POSTGRES_PASSWORD": "pg0password0from0env",
    "REDIS_PASSWORD": "redis0password0from0env",
}


class Unset(Exception):
    """A required variable (${VAR:?message}) is unset or empty: compose refuses to start."""


def interpolate(value, env: dict[str, str]):
    """The compose file's text as compose reads it with `env` (its .env): ${VAR}, $VAR,
    ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}; $$ is a literal $."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("braced") or match.group("bare")
        given = env.get(name)
        operator, argument = match.group("operator") or "", match.group("argument") or ""
        missing = given is None or (operator.startswith(":") and given == "")
        if operator.endswith("-") and missing:
            return argument
        if operator.endswith("?") and missing:
            raise Unset(f"{name}: {argument}")
        return given or ""

    pattern = (
        r"\$\$|\$\{(?P<braced>\w+)(?:(?P<operator>:?[-?])(?P<argument>[^}]*))?\}|\$(?P<bare>\w+)"
    )
    return re.sub(pattern, one, value)


def rendered(**env: str) -> dict:
    """The services as compose runs them with .env holding ENV and `env`."""
    return interpolate(SERVICES, {**ENV, **env})


def words(command: str | list[str]) -> list[str]:
    return command if isinstance(command, list) else shlex.split(command)


def resolve(dotted: str, separator: str):
    module_name, _, attribute = dotted.partition(separator)
    return getattr(importlib.import_module(module_name), attribute)


def option(argv: list[str], *names: str) -> str:
    for index, word in enumerate(argv):
        if word in names:
            return argv[index + 1]
    raise AssertionError(f"none of {names} in {argv}")


def test_every_service_is_there_with_a_healthcheck():
    assert set(SERVICES) >= {"web", "worker", "beat", "redis", "postgres"}
    for name, service in SERVICES.items():
        assert service["healthcheck"]["test"], name
        for dependency in service.get("depends_on", {}):
            assert dependency in SERVICES, (name, dependency)


def test_web_runs_migrations_then_the_one_server():
    command = SERVICES["web"]["command"]
    assert "manage.py migrate --noinput" in command
    argv = words(words(command)[-1].split("&&")[-1])
    assert argv[:3] == ["python", "manage.py", "ethan_serve"]
    from django.core.management import load_command_class

    load_command_class("ethan_site", argv[2])  # the command exists
    assert option(argv, "--bind") == "0.0.0.0:8000"
    # compose's stop waits longer than the server lets replies finish.
    grace = int(SERVICES["web"]["stop_grace_period"].rstrip("s"))
    assert grace > 2 * settings.ETHAN_DRAIN_SECONDS  # twice over with several processes


def test_worker_and_beat_use_the_project_celery_app():
    worker = words(SERVICES["worker"]["command"])
    beat = words(SERVICES["beat"]["command"])
    for argv in (worker, beat):
        assert argv[0] == "celery"
        app = importlib.import_module(option(argv, "-A", "--app")).celery_app
        assert isinstance(app, Celery)
    assert worker[3] == "worker" and beat[3] == "beat"
    # The worker listens on every queue the routes send to.
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    routed.add(settings.CELERY_TASK_DEFAULT_QUEUE)
    assert set(option(worker, "--queues", "-Q").split(",")) == routed
    scheduler = option(beat, "--scheduler", "-S")
    assert scheduler == settings.CELERY_BEAT_SCHEDULER
    resolve(scheduler, ":")


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_point_at_the_compose_databases(name):
    services = rendered()
    env = services[name]["environment"]
    importlib.import_module(env["DJANGO_SETTINGS_MODULE"])
    assert env["DJANGO_DEBUG"] == "0" and "DJANGO_SECRET_KEY" in env
    database = urlparse(env["DATABASE_URL"])
    postgres = services["postgres"]["environment"]
    assert (database.scheme, database.hostname, database.path) == (
        "postgres",
        "postgres",
        f"/{postgres['POSTGRES_DB']}",
    )
    assert database.username == postgres["POSTGRES_USER"]
    assert (database.password, postgres["POSTGRES_PASSWORD"]) == (ENV["POSTGRES_PASSWORD"],) * 2
    # The broker and the cache: the compose Redis, with its password.
    for url in (env["CELERY_BROKER_URL"], env["ETHAN_CACHE_URL"]):
        redis = urlparse(url)
        assert (redis.hostname, redis.password) == ("redis", ENV["REDIS_PASSWORD"])
    assert urlparse(env["CELERY_BROKER_URL"]).path != urlparse(env["ETHAN_CACHE_URL"]).path


@pytest.mark.parametrize("secret", sorted(ENV))
@pytest.mark.parametrize("given", ["unset", "empty"])
def test_compose_refuses_to_start_without_each_secret(secret, given):
    """No default password: unset or empty in .env, compose stops and names it."""
    env = {name: value for name, value in ENV.items() if name != secret}
    if given == "empty":
        env[secret] = ""
    with pytest.raises(Unset, match=f"^{secret}: set {secret} in .env$"):
        interpolate(SERVICES, env)


def test_redis_requires_its_password_and_its_healthcheck_gives_it():
    redis = rendered()["redis"]
    assert redis["environment"] == {"REDIS_PASSWORD": ENV["REDIS_PASSWORD"]}
    script = words(redis["command"])[-1]
    assert '--requirepass "$REDIS_PASSWORD"' in script
    assert 'REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli ping' in redis["healthcheck"]["test"][1]


def test_ports_are_published_on_loopback_unless_told_otherwise():
    published = {name: service.get("ports", []) for name, service in rendered().items()}
    assert published == {
        "web": ["127.0.0.1:8000:8000"],
        "worker": [],
        "beat": [],
        "postgres": [],
        "redis": [],
    }
    chosen = rendered(ETHAN_PUBLISH_ADDRESS="192.0.2.10")
    assert chosen["web"]["ports"] == ["192.0.2.10:8000:8000"]


def test_the_image_contains_every_package():
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+)", dockerfile, re.MULTILINE))
    for source in copied:
        assert (ROOT / source).exists(), source
    pyproject = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"include = \[(.*?)\]", pyproject).group(1)
    for package in re.findall(r'"(\w+)\*"', packages):
        if (ROOT / package).is_dir():
            assert package in copied, f"{package} is not copied into the image"


@pytest.mark.services
def test_compose_redis_command_and_healthcheck_on_a_real_redis(tmp_path):
    """The redis service's own command on this machine's redis-server (compose runs redis:7):
    no answer without the password, the app services' URLs get in, the healthcheck passes only
    with the right password. Pointed at a free port: the one thing changed."""
    import subprocess
    import time

    import redis as redis_py

    from tests.conftest import end_group, start_in_group
    from tests.web_server import free_port

    service = rendered()["redis"]
    port = free_port()
    script = words(service["command"])[-1] + f" --port {port} --bind 127.0.0.1 --dir {tmp_path}"
    env = {"PATH": "/usr/bin:/bin", **service["environment"]}
    server = start_in_group(["sh", "-c", script], env=env)

    def healthcheck(password: str) -> int:
        check = service["healthcheck"]["test"][1].replace("redis-cli", f"redis-cli -p {port}")
        return subprocess.run(
            ["sh", "-c", check], env={**env, "REDIS_PASSWORD": password}
        ).returncode

    try:
        deadline = time.monotonic() + 30
        while healthcheck(ENV["REDIS_PASSWORD"]) != 0:  # healthy once it answers
            assert server.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        assert healthcheck("wrong") != 0
        with pytest.raises(redis_py.AuthenticationError):
            redis_py.Redis(port=port).ping()
        environment = rendered()["web"]["environment"]
        for name in ("CELERY_BROKER_URL", "ETHAN_CACHE_URL"):
            url = environment[name].replace("@redis:6379", f"@127.0.0.1:{port}")
            assert redis_py.Redis.from_url(url).ping() is True, name
    finally:
        end_group(server)
