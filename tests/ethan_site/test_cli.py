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


def test_ethan_import_and_export_from_the_console_script(tmp_path):
    import json

    source = tmp_path / "old"
    (source / "memory").mkdir(parents=True)
    (source / "memory/facts.json").write_text(json.dumps([{"content": "用户喜欢美式咖啡"}]))
    home = tmp_path / "home"
    imported = run_ethan(["import", "--home", str(source), "--user", "ada"], home)
    assert imported.returncode == 0, imported.stderr
    assert "facts: 1 new" in imported.stdout
    exported = run_ethan(["export", "--home", str(tmp_path / "out"), "--user", "ada"], home)
    assert exported.returncode == 0, exported.stderr
    facts = json.loads((tmp_path / "out/memory/facts.json").read_text())
    assert [f["content"] for f in facts] == ["用户喜欢美式咖啡"]
    refused = run_ethan(["import", "--home", str(tmp_path / "nowhere")], home)
    assert refused.returncode == 1 and "is not a folder" in refused.stderr
