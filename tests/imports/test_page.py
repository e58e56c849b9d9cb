"""导入 on the memory page: the owner uploads an export (bounded, CSRF-protected), a background
task imports and learns from it, and the page polls its progress; another person sees none
of it."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from agent_app import history_import
from agent_app.history_import import import_upload_run, upload_threads_join
from ethan_shared.queue import run_deferred
from memory_app.models import Fact
from sessions_app.models import ChatSession, ImportRun
from tests.imports.exports import ChatGPT, claude


def client_for(user, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def export_file(name: str = "conversations.json", data: bytes | None = None):
    if data is None:
        conversation = claude("u-1", "Hello", [("human", "I live in Lisbon"), ("assistant", "Ok")])
        data = json.dumps([conversation]).encode()
    return SimpleUploadedFile(name, data, content_type="application/json")


def upload(client: Client, **fields):
    form = {"source": "claude", "export": export_file(), "learn": "on", **fields}
    return client.post("/memory/import/", form)


# Committed for real: the upload's task and the learning chain are queued after commits, as
# in a running server.
@pytest.mark.django_db(transaction=True)
def test_an_upload_is_imported_and_learnt_in_the_background(owner, llm_config, settings):
    # Embedded, as on a laptop (the services suite has a broker: tests/services covers it).
    settings.ETHAN_EMBEDDED = True
    client = client_for(owner)
    page = client.get("/memory/import/")
    assert page.status_code == 200
    assert b'enctype="multipart/form-data"' in page.content
    assert b"csrfmiddlewaretoken" in page.content
    answer = upload(client)
    assert (answer.status_code, answer["Location"]) == (302, "/memory/import/")
    # Embedded, the import runs on a thread of its own, not the request's (nothing deferred
    # there), with the learning after it.
    assert run_deferred() == 0
    upload_threads_join()
    run = ImportRun.objects.get(owner=owner)
    assert (run.file_name, run.learn) == ("conversations.json", True)
    assert (run.status, run.conversations_done, run.conversations_total) == ("done", 1, 1)
    assert (run.sessions_created, run.messages_created, run.learn_done) == (1, 2, 1)
    assert run.upload is None
    assert ChatSession.objects.get(owner=owner).channel == "import"
    fact = Fact.objects.get(owner=owner, content__icontains="Lisbon")
    assert list(fact.sources.values_list("content", flat=True)) == ["I live in Lisbon"]

    status = client.get(f"/memory/import/{run.pk}/status/").json()
    assert status["status"] == "done" and status["finished"] is True
    assert (status["learn_done"], status["learn_total"]) == (1, 1)
    shown = client.get("/memory/import/").content.decode()
    assert f'id="import-{run.pk}"' in shown and "1 new sessions, 2 messages" in shown
    # A second run of the same task (a redelivery) does nothing.
    import_upload_run(run_id=run.pk)
    assert ChatSession.objects.filter(owner=owner).count() == 1


def test_a_bad_upload_fails_with_its_line_and_writes_nothing(owner):
    client = client_for(owner)
    upload(client, export=export_file("export.zip", b"PK\x03\x04 not really a zip"))
    run = ImportRun.objects.get(owner=owner)
    assert (run.status, run.upload is not None) == ("queued", True)  # its task after commit
    import_upload_run(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith("export.zip: not a readable zip")
    assert run.upload is None
    assert not ChatSession.objects.filter(owner=owner).exists()


def test_without_learning(owner):
    client = client_for(owner)
    chat = ChatGPT("c-1", "x").exchange(("I live in Lisbon", "ok"))
    data = json.dumps([chat.export()]).encode()
    client.post(
        "/memory/import/", {"source": "chatgpt", "export": export_file(data=data)}
    )  # the box unticked
    run = ImportRun.objects.get(owner=owner)
    import_upload_run(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.learn, run.sessions_created) == ("done", False, 1)
    assert not Fact.objects.filter(owner=owner).exists()


def test_runs_are_their_owners_only(owner, other_owner):
    upload(client_for(owner))
    run = ImportRun.objects.get(owner=owner)
    other = client_for(other_owner)
    assert other.get(f"/memory/import/{run.pk}/status/").status_code == 404
    assert f'id="import-{run.pk}"' not in other.get("/memory/import/").content.decode()
    anonymous = Client().get("/memory/import/")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]


def test_an_upload_needs_the_pages_csrf_token(owner):
    client = client_for(owner, enforce_csrf_checks=True)
    assert upload(client).status_code == 403
    assert not ImportRun.objects.exists()


@pytest.mark.parametrize("declared", [False, True])
def test_an_upload_over_the_limit_is_refused(owner, settings, declared):
    settings.ETHAN_IMPORT_MAX_BYTES = 100
    client = client_for(owner)
    if declared:
        # Refused by its declared length, before the body is read.
        answer = client.post(
            "/memory/import/",
            {"source": "claude", "export": export_file()},
            CONTENT_LENGTH=str(200 * 1024),
        )
        assert answer.status_code == 413
    else:
        answer = upload(client)
        assert answer.status_code == 400
    assert "The file is" in answer.content.decode()
    assert not ImportRun.objects.exists()


def test_a_delivery_again_after_a_worker_died_mid_read_fails_the_run_and_reads_nothing(
    owner, settings
):
    settings.ETHAN_EMBEDDED = False  # a broker, which delivers again what a dead worker held
    upload(client_for(owner))
    run = ImportRun.objects.get(owner=owner)
    # The worker died while reading (killed: by its input, as a deep file once did, or a
    # restart): its status says so, the upload is still in its row; the broker delivers again.
    ImportRun.objects.filter(pk=run.pk).update(status="reading", conversations_done=0)
    import_upload_run(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.sessions_created, run.upload) == ("failed", 0, None)
    assert run.error.startswith("conversations.json: the import stopped while reading")
    assert not ChatSession.objects.filter(owner=owner).exists()


def test_a_run_left_reading_by_a_stopped_process_is_shown_failed(owner, settings):
    client = client_for(owner)
    upload(client)
    run = ImportRun.objects.get(owner=owner)
    silent = timezone.now() - timedelta(seconds=settings.ETHAN_IMPORT_MAX_SECONDS + 180)
    ImportRun.objects.filter(pk=run.pk).update(status="reading", updated_at=silent)
    status = client.get(f"/memory/import/{run.pk}/status/").json()
    assert (status["status"], status["finished"]) == ("failed", True)
    assert status["error"].startswith("conversations.json: the import stopped while reading")
    run.refresh_from_db()
    assert run.upload is None
    # A run reading now, with word within the limit, is left to its reader.
    upload(client)
    recent = ImportRun.objects.filter(owner=owner).latest("pk")
    ImportRun.objects.filter(pk=recent.pk).update(status="reading")
    assert client.get(f"/memory/import/{recent.pk}/status/").json()["status"] == "reading"


@pytest.mark.django_db(transaction=True)
def test_embedded_a_run_a_stopped_process_left_queued_is_taken_up(owner, settings):
    settings.ETHAN_EMBEDDED = True
    run = ImportRun.objects.create(
        owner=owner,
        source="claude",
        file_name="conversations.json",
        learn=False,
        upload=json.dumps(
            [claude("u-1", "Hi", [("human", "hi"), ("assistant", "hello")])]
        ).encode(),
        updated_at=timezone.now() - timedelta(minutes=5),
    )
    page = client_for(owner).get("/memory/import/")
    assert page.status_code == 200
    upload_threads_join()
    run.refresh_from_db()
    assert (run.status, run.sessions_created) == ("done", 1)


@pytest.mark.django_db(transaction=True)
def test_embedded_the_upload_is_read_on_a_thread_of_its_own(owner, settings, monkeypatch):
    settings.ETHAN_EMBEDDED = True
    threads = []
    real = history_import.history_import

    def watched(**kwargs):
        threads.append(threading.current_thread().name)
        return real(**kwargs)

    monkeypatch.setattr(history_import, "history_import", watched)
    answer = upload(client_for(owner), learn="")
    assert answer.status_code == 302
    upload_threads_join()
    run = ImportRun.objects.get(owner=owner)
    assert (run.status, threads) == ("done", [f"ethan-import-{run.pk}"])


def test_skipped_conversations_are_shown_on_their_run_and_no_banner(owner):
    client = client_for(owner)
    good = claude("u-1", "Home", [("human", "I live in Lisbon"), ("assistant", "Ok")])
    data = json.dumps([good, {"uuid": "u-2", "name": "Trip"}]).encode()
    upload(client, export=export_file(data=data), learn="")
    run = ImportRun.objects.get(owner=owner)
    import_upload_run(run_id=run.pk)
    status = client.get(f"/memory/import/{run.pk}/status/").json()
    assert (status["status"], status["conversations_done"]) == ("done", 1)
    assert status["conversations_skipped"] == 1
    line = "conversations.json: skipped conversation 2 ('Trip'): it has no chat_messages"
    assert status["skipped"] == line
    page = client.get("/memory/import/").content.decode()
    assert 'Skipped: <span class="skipped-count">1</span>' in page
    assert line.replace("'", "&#x27;") in page
    # The run's row says how it went; no banner above it says otherwise.
    assert 'class="messages"' not in page


def test_the_help_the_page_names_is_on_the_page(owner):
    page = client_for(owner).get("/memory/import/").content.decode()
    assert 'href="#import-help"' in page and '<details id="import-help"' in page
    assert "Settings → Data controls → Export data" in page
    assert "Settings → Privacy → Export data" in page


def test_embedded_a_second_start_of_a_run_being_read_leaves_it_to_its_reader(owner, settings):
    settings.ETHAN_EMBEDDED = True
    upload(client_for(owner))
    run = ImportRun.objects.get(owner=owner)
    ImportRun.objects.filter(pk=run.pk).update(status="reading")  # another thread has it
    import_upload_run(run_id=run.pk)
    run.refresh_from_db()
    assert (run.status, run.error, run.upload is not None) == ("reading", "", True)
