"""History from other assistants (ChatGPT, Claude): the import, then learning from it
(docs/import.md).

The import itself is sessions_app's (sessions_app.imports): each conversation becomes a session
on the `import` channel. Learning crosses the layers, so it lives here: each imported session
is consolidated as a live one is (agent_app.lifecycle.sessions_learn: a long one's compress
batches, folds, then its end with the episode and last facts; short ones' ends together in one
call, as short chats' ends are), oldest conversation first, so that what the person said later
supersedes what they said before.

An imported session has no end (ended_at) until it has been learnt: that is what "still to
learn" means, durably. A stop anywhere (the console closed, a worker killed) leaves the rest
pending, and the next `ethan import --learn` (or the same import again) goes on from there;
sessions_learn is safe to repeat on the step that was being learnt. An import with
--no-learn leaves them all pending, and nothing else picks them up (the end sweep and the
console's catch-up only look at ended sessions, and memory.catch_up leaves imported sessions
not learnt yet to their import).

With a broker, learning is a chain of tasks on the memory queue, one step each (each task
queues the next), so the order holds and each step is acknowledged on its own; embedded, the
same steps run in this process, under a progress bar.

The memory page's upload (import_upload_run) is read once: a delivery of its task that finds
it already reading (the one before stopped: a worker killed, by its input or a restart) marks
it failed rather than reading it again, as does a run reading with no word for longer than a
read may take (import_runs_recover, when the page is shown). Embedded, it runs on a thread of
its own, never on the event loop or a request's thread, and a run queued in a process that
stopped is taken up again.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connections, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from agent_app.lifecycle import learn_batch, sessions_learn
from agent_app.vectors import vectors_for_owner
from ethan_llm.memory import CONSOLIDATE_SYSTEM
from ethan_llm.tokens import estimate_tokens
from ethan_shared.queue import enqueue, ethan_task, run_deferred
from memory_app.working import MemoryConfig, memory_config, work_due
from sessions_app.imports.export import CONVERSATIONS, ExportError
from sessions_app.imports.services import ImportReport, export_import
from sessions_app.models import ChatSession, ImportRun, Message

log = logging.getLogger(__name__)

# How often (in conversations or sessions) a run's progress row is written.
PROGRESS_EVERY = 20
# A run reading with no word for longer than its first, timed read may take
# (ETHAN_IMPORT_MAX_SECONDS) plus this was left by a process that stopped; the writing after
# that read writes its progress every PROGRESS_EVERY conversations.
READING_GRACE = timedelta(minutes=2)
# Embedded, a run still queued this long after its upload was queued in a process that stopped
# (its thread starts as the upload's answer is sent).
QUEUED_GRACE = timedelta(seconds=30)
# Pending sessions read to choose the next learning step: more than one step ever takes (at
# most END_BATCH_MAX_ROUNDS sessions of a round each).
LEARN_WINDOW = 50


def sessions_to_learn(*, owner: AbstractBaseUser) -> QuerySet:
    """The owner's imported sessions not learnt yet, oldest conversation first."""
    return (
        ChatSession.objects.filter(
            owner=owner,
            channel=ChatSession.Channel.IMPORT,
            ended_at__isnull=True,
            round_count__gt=0,
        )
        .exclude(external_id="")
        .order_by("created_at", "pk")
    )


@dataclass(frozen=True)
class LearningEstimate:
    """What learning the pending sessions will cost: compression-model calls and the tokens
    they read (an estimate: ethan_llm.tokens, and the consolidation prompt once per call)."""

    conversations: int = 0
    rounds: int = 0
    calls: int = 0
    tokens: int = 0

    def line(self) -> str:
        if not self.conversations:
            return "nothing new to learn"
        return (
            f"to learn: {_count(self.conversations, 'conversation')}, "
            f"{_count(self.rounds, 'round')}: about {_count(self.calls, 'compression-model call')}"
            f" reading about {_count(self.tokens, 'token')}"
        )


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def session_calls(rounds: int, config: MemoryConfig) -> int:
    """Compression-model calls session_learn makes on a session of `rounds` rounds alone: the
    consolidator's steps as the due rule names them (memory_app.working.work_due: a call per
    compress batch that left the hot zone, a fold once the warm zone is full), and its end."""
    if rounds < 1:
        return 0
    calls = compressed = folded = 0
    while (
        work := work_due(
            round_count=rounds,
            compressed=compressed,
            extracted=compressed,
            folded=folded,
            config=config,
        )
    ) is not None:
        calls += 1
        if work == "compress":
            compressed += config.compress_batch
        else:  # a fold: an import's sessions are extracted with their batches
            folded = compressed
    return calls + 1


def learning_estimate(*, owner: AbstractBaseUser) -> LearningEstimate:
    """The calls follow the learning's own steps (learn_batch): a long session's calls, one
    call for each run of short ones."""
    config = memory_config()
    pending = sessions_to_learn(owner=owner)
    conversations = rounds = calls = 0
    window: list[tuple[str, int]] = []
    for step in pending.values_list("pk", "round_count").iterator():
        conversations += 1
        rounds += step[1]
        window.append(step)
        if len(window) > LEARN_WINDOW:
            calls += _step_calls(window, config)
    while window:
        calls += _step_calls(window, config)
    contents = Message.objects.filter(session__in=pending).values_list("content", flat=True)
    tokens = sum(estimate_tokens(text) for text in contents.iterator(chunk_size=2000))
    return LearningEstimate(
        conversations=conversations,
        rounds=rounds,
        calls=calls,
        tokens=tokens + calls * estimate_tokens(CONSOLIDATE_SYSTEM),
    )


def _step_calls(window: list[tuple[str, int]], config: MemoryConfig) -> int:
    """The calls of the next learning step over `window` (one for short sessions together, a
    long one's own), which it takes off the window."""
    step = learn_batch(window, config=config)
    rounds = dict(window[: len(step)])  # a step is the window's first sessions
    del window[: len(step)]
    return 1 if len(step) > 1 else session_calls(rounds[step[0]], config)


def imported_sessions_learn(*, session_ids: list[str]) -> None:
    """Learn one step of imported sessions (learn_batch), then give them their end (each
    conversation's last activity), which takes them off the pending list. Killed in between,
    they are learnt again: safe."""
    sessions_learn(session_ids=session_ids)
    ChatSession.objects.filter(pk__in=session_ids, ended_at__isnull=True).update(
        ended_at=F("updated_at")
    )


def next_step(*, owner: AbstractBaseUser) -> list[str]:
    """The imported sessions the next learning step takes, oldest first (learn_batch)."""
    return learn_batch(
        list(sessions_to_learn(owner=owner).values_list("pk", "round_count")[:LEARN_WINDOW])
    )


def imports_learn(
    *, owner: AbstractBaseUser, progress: Callable[[int, int], None] | None = None
) -> int:
    """Learn every pending imported session of `owner` here, in order; returns how many."""
    total = sessions_to_learn(owner=owner).count()
    done = 0
    while step := next_step(owner=owner):
        imported_sessions_learn(session_ids=step)
        done += len(step)
        if progress:
            progress(min(done, total), total)
    return done


def imports_learn_start(*, owner: AbstractBaseUser, run: ImportRun | None = None) -> int:
    """Queue the learning of the owner's pending imported sessions (the chain's first step,
    after the current transaction commits); returns how many are pending."""
    pending = sessions_to_learn(owner=owner).count()
    vectors_for_owner(owner_id=owner.pk)  # the imported messages' vectors, in the background
    if run is not None:
        _run_update(run, status=ImportRun.Status.LEARNING, learn_total=pending, learn_done=0)
    if pending:
        enqueue(imports_learn_next_task, owner.pk, run.pk if run else None)
    elif run is not None:
        _run_update(run, status=ImportRun.Status.DONE)
    return pending


def imports_learn_next(*, owner_id: int, run_id: int | None = None) -> list[str]:
    """One step of the chain: learn the oldest pending sessions (next_step: one long session,
    or short ones together) and queue the next step. Returns the sessions learnt (none when
    nothing was left: the run is done)."""
    owner = get_user_model().objects.filter(pk=owner_id).first()
    run = ImportRun.objects.filter(pk=run_id).first() if run_id else None
    step = next_step(owner=owner) if owner else []
    if not step:
        if run is not None:
            _run_update(run, status=ImportRun.Status.DONE, learn_done=run.learn_total)
        return []
    imported_sessions_learn(session_ids=step)
    if run is not None:
        ImportRun.objects.filter(pk=run.pk).update(
            learn_done=F("learn_done") + len(step), updated_at=timezone.now()
        )
    enqueue(imports_learn_next_task, owner_id, run_id)
    return step


def history_import(
    *,
    owner: AbstractBaseUser,
    path: Path,
    source: str,
    run: ImportRun | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import an export for `owner` (ExportError, nothing written, for a bad file), with its
    progress on `run` (the memory page's row) and through `progress`."""

    def show(done: int, total: int) -> None:
        if run is not None and (done % PROGRESS_EVERY == 0 or done == total):
            _run_update(run, conversations_done=done, conversations_total=total)
        if progress:
            progress(done, total)

    if run is not None:
        _run_update(run, status=ImportRun.Status.READING)
    report = export_import(owner=owner, path=path, source=source, progress=show)
    if run is not None:
        _run_update(
            run,
            conversations_done=report.conversations,
            conversations_total=report.conversations,
            sessions_created=report.sessions_created,
            messages_created=report.messages_created,
            conversations_skipped=len(report.skipped),
            skipped="\n".join(report.skipped[: ImportRun.SKIPPED_SHOWN]),
        )
    return report


def import_upload_run(*, run_id: int) -> None:
    """The memory page's upload, in the background: the file out of its row into a private
    temporary file, imported, then learnt from (unless the person asked not to). Claimed from
    queued to reading first, so it is read once: a delivery again that finds it reading (the
    one before it stopped: a worker killed, as a 400 KB file nested deep once took a worker to
    19 GB and each redelivery the next one) marks it failed and reads nothing. Every way it
    ends is written on the run, so its task always ends acknowledged and is never retried."""
    claimed = ImportRun.objects.filter(pk=run_id, status=ImportRun.Status.QUEUED).update(
        status=ImportRun.Status.READING, updated_at=timezone.now()
    )
    run = ImportRun.objects.select_related("owner").defer("upload").filter(pk=run_id).first()
    if run is None:
        return
    if not claimed:
        # With a broker, a delivery that finds the run reading is one again after the one before
        # died (the visibility timeout is longer than a task may run: never two at once).
        # Embedded there is no delivery again, only a second start of a run another thread has
        # just taken (import_runs_recover): that one is left to it.
        if run.status == ImportRun.Status.READING and not settings.ETHAN_EMBEDDED:
            _run_update(
                run, status=ImportRun.Status.FAILED, error=_interrupted(run.file_name), upload=None
            )
        return  # or an earlier delivery got past the import
    data = ImportRun.objects.filter(pk=run.pk).values_list("upload", flat=True).first()
    if data is None:
        _run_update(run, status=ImportRun.Status.FAILED, error="the upload was lost; send again")
        return
    try:
        _upload_import(run, bytes(data))
    except ExportError as exc:
        _run_update(run, status=ImportRun.Status.FAILED, error=str(exc), upload=None)
        return
    except Exception as exc:  # anything else (a task's time limit, a bug): failed, said
        log.exception("import of run %s failed", run.pk)
        error = f"{run.file_name}: the import stopped ({type(exc).__name__}); send it again"
        _run_update(run, status=ImportRun.Status.FAILED, error=error, upload=None)
        return
    del data
    _run_update(run, upload=None)
    if run.learn:
        imports_learn_start(owner=run.owner, run=run)
    else:
        _run_update(run, status=ImportRun.Status.DONE)


def _interrupted(file_name: str) -> str:
    return (
        f"{file_name}: the import stopped while reading (the server or worker stopped) and is "
        "not read again; send the file again: what was imported is kept, the rest is added"
    )


def import_upload(
    *, owner: AbstractBaseUser, source: str, file_name: str, learn: bool, upload: bytes
) -> ImportRun:
    """An uploaded export stored as a run and started once stored (import_upload_start)."""
    with transaction.atomic():
        run = ImportRun.objects.create(
            owner=owner, source=source, file_name=file_name[:255], learn=learn, upload=upload
        )
        import_upload_start(run)
    return run


def import_upload_start(run: ImportRun) -> None:
    """Start an upload's import once the current transaction commits: on the memory queue with
    a broker; embedded, on a thread of its own (the deferred tasks run on the thread that
    answered the request, which it would hold for as long as the import reads)."""
    if settings.ETHAN_EMBEDDED:
        transaction.on_commit(lambda: _import_thread_start(run.pk))
    else:
        enqueue(import_upload_task, run.pk)


# Embedded: the threads importing uploads in this process (upload_threads_join waits for them).
_threads: set[threading.Thread] = set()
_threads_lock = threading.Lock()


def _import_thread_start(run_id: int) -> None:
    thread = threading.Thread(
        target=_import_thread, args=(run_id,), name=f"ethan-import-{run_id}", daemon=True
    )
    with _threads_lock:
        _threads.add(thread)
    thread.start()


def _import_thread(run_id: int) -> None:
    try:
        import_upload_run(run_id=run_id)
        run_deferred()  # the learning chain it queued, step by step, on this thread
    except Exception:  # a thread's error has no one to answer it: logged
        log.exception("embedded import of run %s failed", run_id)
    finally:
        connections.close_all()
        with _threads_lock:
            _threads.discard(threading.current_thread())


def upload_threads_join(timeout: float | None = None) -> None:
    """Wait for this process's import threads (embedded) to end."""
    with _threads_lock:
        running = list(_threads)
    for thread in running:
        thread.join(timeout)


def import_runs_recover(*, owner: AbstractBaseUser) -> None:
    """The owner's runs left by a process that stopped, as the memory page shows them: one
    reading with no word for longer than a read may take is failed, never shown reading
    forever; embedded, one still queued after QUEUED_GRACE is started again here (claimed by
    its time, so one process takes it up). With a broker a queued run waits in its queue."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.ETHAN_IMPORT_MAX_SECONDS) - READING_GRACE
    for run in ImportRun.objects.filter(
        owner=owner, status=ImportRun.Status.READING, updated_at__lt=stale
    ).only("pk", "file_name"):
        ImportRun.objects.filter(pk=run.pk, status=ImportRun.Status.READING).update(
            status=ImportRun.Status.FAILED,
            error=_interrupted(run.file_name),
            upload=None,
            updated_at=now,
        )
    if not settings.ETHAN_EMBEDDED:
        return
    queued = ImportRun.objects.filter(
        owner=owner, status=ImportRun.Status.QUEUED, updated_at__lt=now - QUEUED_GRACE
    ).values_list("pk", "updated_at")
    for pk, updated_at in queued:
        taken = ImportRun.objects.filter(
            pk=pk, status=ImportRun.Status.QUEUED, updated_at=updated_at
        ).update(updated_at=now)
        if taken:
            _import_thread_start(pk)


def _upload_import(run: ImportRun, data: bytes) -> None:
    """Import the uploaded bytes through a private temporary file (the reader streams from a
    file), named as the person's file was, in a folder of its own: every line the reading
    writes (a refusal, a conversation skipped) names the file they uploaded."""
    folder = Path(tempfile.mkdtemp(prefix="ethan-import-"))
    name = Path(run.file_name).name
    if not name or name.startswith("."):
        name = "export.zip" if data[:4] == b"PK\x03\x04" else CONVERSATIONS
    path = folder / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        history_import(owner=run.owner, path=path, source=run.source, run=run)
    finally:
        path.unlink(missing_ok=True)
        folder.rmdir()


def _run_update(run: ImportRun, **fields) -> None:
    for name, value in fields.items():
        setattr(run, name, value)
    fields["updated_at"] = timezone.now()
    ImportRun.objects.filter(pk=run.pk).update(**fields)


@ethan_task(name="memory.import_upload")
def import_upload_task(run_id: int) -> None:
    import_upload_run(run_id=run_id)


@ethan_task(name="memory.import_learn_next")
def imports_learn_next_task(owner_id: int, run_id: int | None = None) -> list[str]:
    return imports_learn_next(owner_id=owner_id, run_id=run_id)
