from ethan_site.cli import route
from tests.conftest import run_ethan


def test_route_speaks_the_original_cli():
    assert route([]) == ["ethan_chat"]
    assert route(["-r", "last"]) == ["ethan_chat", "-r", "last"]
    assert route(["-r", "d139", "--mode", "陪伴"]) == ["ethan_chat", "-r", "d139", "--mode", "陪伴"]
    assert route(["chat", "--model", "offline"]) == ["ethan_chat", "--model", "offline"]
    assert route(["session", "list"]) == ["ethan_session", "list"]
    assert route(["session", "delete", "d139", "--yes"]) == [
        "ethan_session",
        "delete",
        "d139",
        "--yes",
    ]
    assert route(["import", "--home", "/x"]) == ["ethan_import", "--home", "/x"]
    assert route(["manage", "migrate"]) == ["migrate"]


def test_ethan_migrates_a_fresh_home_and_resumes(tmp_path):
    first = run_ethan(["--user", "ada"], tmp_path, stdin="remember the milk\n")
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "ethan.sqlite3").exists()
    again = run_ethan(["-r", "last", "--user", "ada"], tmp_path, stdin="/exit\n")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Resumed s_")
    assert "  user: remember the milk" in again.stdout
    unknown = run_ethan(["-r", "nope", "--user", "ada"], tmp_path)
    assert (unknown.returncode, unknown.stderr) == (1, "CommandError: no session matches 'nope'\n")


def test_ethan_help(tmp_path):
    shown = run_ethan(["--help"], tmp_path)
    assert shown.returncode == 0
    assert "ethan session list|show|delete|search" in shown.stdout
