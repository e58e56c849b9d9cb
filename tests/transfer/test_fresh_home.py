"""`ethan import` on a fresh machine: one line while the database is prepared (not a line per
migration), then the report. The same preparation opens `make chat`."""

from __future__ import annotations

from tests.conftest import run_ethan
from tests.transfer.test_import_export import build_layout


def test_a_fresh_home_is_prepared_in_one_line(tmp_path):
    source = build_layout(tmp_path / "old")
    result = run_ethan(["import", "--home", str(source), "--dry-run"], tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "Preparing the database…\n"
    assert "messages: 6 new" in result.stdout
    assert result.stdout.rstrip().endswith("dry run: nothing was written")
