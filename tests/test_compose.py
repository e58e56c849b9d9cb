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
    assert set(SERVICES) >= {"web", "mcp", "worker", "beat", "redis", "postgres"}
    for name, service in SERVICES.items():
        assert service["healthcheck"]["test"], name
        for dependency in service.get("depends_on", {}):
            assert dependency in SERVICES, (name, dependency)


def test_web_runs_migrations_then_gunicorn_on_the_wsgi_app():
    command = SERVICES["web"]["command"]
    assert "manage.py migrate --noinput" in command
    target = re.search(r"gunicorn (\S+)", command).group(1)
    from django.core.handlers.wsgi import WSGIHandler

    assert isinstance(resolve(target, ":"), WSGIHandler)


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


@pytest.mark.parametrize("name", ["web", "worker", "beat"])
def test_app_services_point_at_the_compose_databases(name):
    env = SERVICES[name]["environment"]
    importlib.import_module(env["DJANGO_SETTINGS_MODULE"])
    assert env["DJANGO_DEBUG"] == "0" and "DJANGO_SECRET_KEY" in env
    database = urlparse(env["DATABASE_URL"])
    postgres = SERVICES["postgres"]["environment"]
    assert (database.scheme, database.hostname, database.path) == (
        "postgres",
        "postgres",
        f"/{postgres['POSTGRES_DB']}",
    )
    assert database.username == postgres["POSTGRES_USER"]
    assert urlparse(env["CELERY_BROKER_URL"]).hostname == "redis"


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


def test_mcp_serves_streamable_http_with_its_health_on_the_published_port():
    from django.core.management import load_command_class

    argv = words(SERVICES["mcp"]["command"])
    assert argv[:3] == ["python", "manage.py", "ethan_mcp"] and "--http" in argv
    load_command_class("agent_app", argv[2])  # the command exists
    port = option(argv, "--bind").rpartition(":")[2]
    assert f"{port}:{port}" in SERVICES["mcp"]["ports"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(SERVICES["mcp"]["healthcheck"]["test"])
