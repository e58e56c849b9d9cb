from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ethan_shared.config import Config, ConfigError, ethan_home
from tests.conftest import run_ethan, run_manage


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(textwrap.dedent(text), encoding="utf-8")


def test_home_defaults_to_dot_ethan(monkeypatch):
    monkeypatch.setenv("HOME", "/home/ada")
    assert ethan_home({}) == Path("/home/ada/.ethan")
    assert ethan_home({"ETHAN_HOME": "/srv/ethan"}) == Path("/srv/ethan")


def test_precedence_environment_then_file_then_default(tmp_path):
    write_config(
        tmp_path,
        """
        model: claude-sonnet-4-6
        DATABASE_URL: postgres://db/from_file
        memory:
          hot_size: 12
        django_debug: false
    """,
    )
    config = Config.load({"ETHAN_HOME": str(tmp_path), "DATABASE_URL": "sqlite:///env.db"})
    assert config.get("DATABASE_URL", "default", str) == "sqlite:///env.db"
    assert config.get("ETHAN_MODEL", "offline", str) == "claude-sonnet-4-6"
    assert config.get("ETHAN_MEMORY_HOT_SIZE", 10, int) == 12
    assert config.get("ETHAN_MEMORY_WARM_CAPACITY", 20, int) == 20
    assert config.get("DJANGO_DEBUG", True, bool) is False
    assert config.source_of("DATABASE_URL") == "environment variable DATABASE_URL"
    assert config.source_of("ETHAN_MODEL") == f"{tmp_path / 'config.yaml'}, line 2 (model)"
    assert config.source_of("CELERY_BROKER_URL") == "default"


def test_missing_or_empty_file_means_defaults(tmp_path):
    assert Config.load({"ETHAN_HOME": str(tmp_path)}).get("ETHAN_MODEL", "x", str) == "x"
    write_config(tmp_path, "# nothing yet\n")
    assert Config.load({"ETHAN_HOME": str(tmp_path)}).file_values == {}


def test_broken_yaml_names_the_file_and_line(tmp_path):
    write_config(tmp_path, "model: gpt-4o\nmemory:\n  hot_size: [10\n  warm: 2\n")
    with pytest.raises(ConfigError) as error:
        Config.load({"ETHAN_HOME": str(tmp_path)})
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'config.yaml'}, line 4")
    assert "invalid YAML" in message


def test_config_must_be_a_mapping(tmp_path):
    write_config(tmp_path, "- model\n- gpt-4o\n")
    with pytest.raises(ConfigError, match=r"config.yaml, line 1: expected a mapping"):
        Config.load({"ETHAN_HOME": str(tmp_path)})


def test_bad_values_name_their_source(tmp_path):
    write_config(tmp_path, "model: x\nmemory:\n  hot_size: many\n")
    config = Config.load({"ETHAN_HOME": str(tmp_path), "DJANGO_DEBUG": "maybe"})
    with pytest.raises(ConfigError, match=r"config.yaml, line 3 \(memory_hot_size\): invalid"):
        config.get("ETHAN_MEMORY_HOT_SIZE", 10, int)
    with pytest.raises(ConfigError, match="DJANGO_DEBUG from environment variable DJANGO_DEBUG"):
        config.get("DJANGO_DEBUG", True, bool)


def test_lists_from_env_and_file(tmp_path):
    write_config(tmp_path, "django_allowed_hosts: [a.example, b.example]\n")
    config = Config.load({"ETHAN_HOME": str(tmp_path)})
    assert config.get("DJANGO_ALLOWED_HOSTS", [], list) == ["a.example", "b.example"]
    config = Config.load({"ETHAN_HOME": str(tmp_path), "DJANGO_ALLOWED_HOSTS": "x, y"})
    assert config.get("DJANGO_ALLOWED_HOSTS", [], list) == ["x", "y"]


SHOW = (
    "from django.conf import settings as s; print(s.DATABASES['default']['NAME'], "
    "s.ETHAN_MODEL, s.DEBUG, s.ETHAN_EMBEDDED, s.TIME_ZONE, sep='|')"
)


def _settings(home: Path, **env: str) -> list[str]:
    result = run_manage(["shell", "-v", "0", "-c", SHOW], home, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split("|")


def test_settings_module_follows_the_precedence(tmp_path):
    """End to end: the real settings module in a child process."""
    # Embedded defaults: SQLite under ETHAN_HOME, no model chosen, DEBUG off, no broker.
    assert _settings(tmp_path, TZ="UTC") == [
        str(tmp_path / "ethan.sqlite3"),
        "",
        "False",
        "True",
        "UTC",
    ]
    write_config(
        tmp_path,
        f"database_url: sqlite:///{tmp_path}/from_file.sqlite3\n"
        "model: gemini-2.5-flash\nethan_time_zone: Asia/Shanghai\n",
    )
    assert _settings(tmp_path) == [
        f"{tmp_path}/from_file.sqlite3",
        "gemini-2.5-flash",
        "False",
        "True",
        "Asia/Shanghai",
    ]
    assert _settings(tmp_path, ETHAN_MODEL="offline", CELERY_BROKER_URL="redis://h:1/0") == [
        f"{tmp_path}/from_file.sqlite3",
        "offline",
        "False",
        "False",
        "Asia/Shanghai",
    ]


def test_without_a_secret_key_the_install_makes_its_own_once(tmp_path):
    show = "from django.conf import settings; print(settings.SECRET_KEY, settings.DEBUG)"
    first = run_manage(["shell", "-v", "0", "-c", show], tmp_path)
    assert first.returncode == 0, first.stderr
    key, debug = first.stdout.split()
    assert debug == "False" and len(key) >= 50
    key_file = tmp_path / "secret_key"
    assert key_file.read_text().strip() == key and key_file.stat().st_mode & 0o777 == 0o600
    again = run_manage(["shell", "-v", "0", "-c", show], tmp_path)
    assert again.stdout.split()[0] == key
    chosen = run_manage(["shell", "-v", "0", "-c", show], tmp_path, DJANGO_SECRET_KEY="k" * 50)
    assert chosen.stdout.split()[0] == "k" * 50


def test_check_deploy_passes_with_the_documented_production_settings(tmp_path):
    """docs/operations.md, "Production": behind an HTTPS proxy."""
    production = {
        "DJANGO_SECRET_KEY": "a-production-key-" + "x7Q2" * 12,
        "DJANGO_ALLOWED_HOSTS": "ethan.example.com",
        "ETHAN_HTTPS": "1",
        "LARK_VERIFICATION_TOKEN": "v",
        "LARK_ENCRYPT_KEY": "e",
    }
    passed = run_manage(["check", "--deploy", "--fail-level", "WARNING"], tmp_path, **production)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    without_https = {key: v for key, v in production.items() if key != "ETHAN_HTTPS"}
    warned = run_manage(["check", "--deploy", "--fail-level", "WARNING"], tmp_path, **without_https)
    assert warned.returncode == 1 and "security.W008" in warned.stderr
    no_encrypt_key = {key: v for key, v in production.items() if key != "LARK_ENCRYPT_KEY"}
    warned = run_manage(
        ["check", "--deploy", "--fail-level", "WARNING"], tmp_path, **no_encrypt_key
    )
    assert warned.returncode == 1 and "ethan.W001" in warned.stderr


def test_broken_config_is_one_line_from_every_entry_point(tmp_path):
    write_config(tmp_path, "model: [gpt-4o\n")
    for result in (run_manage(["check"], tmp_path), run_ethan(["session", "list"], tmp_path)):
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1
        assert result.stderr.startswith(
            f"ethan: configuration error: {tmp_path / 'config.yaml'}, line 2"
        )


def test_a_lark_reclaim_time_not_above_the_task_hard_limit_is_refused(tmp_path):
    """The sweep would take back events whose worker is still answering them."""
    write_config(tmp_path, "ethan_task_time_limit: 900\n")
    for result in (
        run_manage(["check"], tmp_path, ETHAN_LARK_RECLAIM_SECONDS="900"),
        run_ethan(["session", "list"], tmp_path),
    ):
        assert result.returncode == 1
        error = result.stderr.splitlines()[-1]  # one line, naming both settings
        assert error.startswith("ethan: configuration error: ETHAN_LARK_RECLAIM_SECONDS from ")
        assert f"ETHAN_TASK_TIME_LIMIT from {tmp_path / 'config.yaml'}, line 1" in error
    assert run_manage(["check"], tmp_path, ETHAN_LARK_RECLAIM_SECONDS="901").returncode == 0


def test_the_v1_limits_are_read_like_every_setting_and_checked_at_start(tmp_path):
    show = (
        "from django.conf import settings; "
        "print(settings.ETHAN_V1_MAX_MESSAGES, settings.ETHAN_V1_MAX_HISTORY_CHARS)"
    )
    defaults = run_manage(["shell", "-v", "0", "-c", show], tmp_path)
    assert defaults.stdout.split() == ["1000", "400000"], defaults.stderr
    write_config(tmp_path, "v1:\n  max_history_chars: 50000\n")
    chosen = run_manage(["shell", "-v", "0", "-c", show], tmp_path, ETHAN_V1_MAX_MESSAGES="200")
    assert chosen.stdout.split() == ["200", "50000"], chosen.stderr
    refused = run_manage(["check"], tmp_path, ETHAN_V1_MAX_MESSAGES="0")
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == (
        "ethan: configuration error: ETHAN_V1_MAX_MESSAGES from environment variable "
        "ETHAN_V1_MAX_MESSAGES: must be at least 1, not 0"
    )
