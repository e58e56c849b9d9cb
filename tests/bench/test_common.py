"""What the benchmarks share (bench.common): where each bench's runs are recorded, the index's
links into those records, and the small helpers the benches' tables use."""

from __future__ import annotations

import re

import pytest

from bench import common

BENCH = common.ROOT / "bench"
INDEX = common.ROOT / "docs" / "benchmarks.md"


def recording_modules() -> set[str]:
    """The benches that append their runs (directly or through run_per_database)."""
    return {
        f"bench.{path.stem}"
        for path in BENCH.glob("*.py")
        if path.stem != "common"
        and re.search(r"\b(append_results|run_per_database)\(", path.read_text(encoding="utf-8"))
    }


def test_every_recording_bench_names_an_existing_topic_file():
    modules = recording_modules()
    assert "bench.concurrent_streams" in modules  # the scan finds run_per_database's callers
    assert modules <= set(common.RECORDS), modules - set(common.RECORDS)
    for module in modules:
        topic = common.records_file(module)
        assert topic.parent == common.ARCHIVE
        text = topic.read_text(encoding="utf-8")
        assert text.startswith(common.archive_header(topic.name)), topic
        assert f"`{module}`" in text.split("\n\n")[1]  # the header names the bench


def test_a_run_is_appended_to_its_topic_file(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "ARCHIVE", tmp_path / "benchmarks")
    command = common.command_line("bench.session_search", ["--quick"])
    common.append_results("Session search: a test", command, "| a |\n|---|", database="SQLite x")
    common.append_results("Session search: again", command, "| b |\n|---|", database="SQLite x")

    written = (tmp_path / "benchmarks" / "search.md").read_text(encoding="utf-8")
    assert written.startswith(common.archive_header("search.md"))
    assert written.index("## Session search: a test") < written.index("## Session search: again")
    assert "- command: `python -m bench.session_search --quick`" in written
    assert "- database: SQLite x" in written
    assert [path.name for path in (tmp_path / "benchmarks").iterdir()] == ["search.md"]


def test_a_bench_missing_from_the_map_records_in_a_file_of_its_own():
    assert common.records_file("bench.new_thing") == common.ARCHIVE / "new-thing.md"
    assert common.archive_header("new-thing.md").startswith("# Benchmarks: new-thing\n")


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered -1, -2… in the file's order."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in markdown.splitlines():
        if not re.match(r"#{1,6} ", line):
            continue
        base = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def test_github_anchors_number_repeats():
    text = "# T\n## Turn overhead\n## Turn overhead\n### Notes: `ethan serve` (issue 27)\n"
    assert github_anchors(text) == {
        "t",
        "turn-overhead",
        "turn-overhead-1",
        "notes-ethan-serve-issue-27",
    }


def test_the_index_links_to_records_that_exist():
    links = re.findall(r"\]\(benchmarks/([\w.-]+\.md)(?:#([^)]+))?\)", INDEX.read_text("utf-8"))
    assert len(links) > 20
    anchored = 0
    for name, anchor in links:
        topic = common.ARCHIVE / name
        assert topic.exists(), name
        if anchor:
            anchored += 1
            assert anchor in github_anchors(topic.read_text(encoding="utf-8")), (name, anchor)
    assert anchored > 20
    # Every topic file is listed in the index.
    assert {path.name for path in common.ARCHIVE.glob("*.md")} <= {name for name, _ in links}


@pytest.mark.parametrize(
    ("text", "expected"), [("10,100_000", (10, 100_000)), ("1000", (1000,)), ("10,", (10,))]
)
def test_comma_sizes(text, expected):
    assert common.comma_sizes(text) == expected


def test_ms_cells():
    assert common.ms_cells((3.14159, 20.0)) == "3.1 | 20.0"
