"""导入 / Import on the memory page: a ChatGPT or Claude export uploaded by its owner, imported
and learnt from in the background (agent_app.history_import), its progress on the page.

The upload is bounded (ETHAN_IMPORT_MAX_BYTES, by its declared length and its size), posted
with the page's CSRF token, and kept in its ImportRun row until the task reads it; the reading
is bounded too (sessions_app.imports.export.ReadLimits) and never runs on a request's thread.
Each run's row says how it is going, failed included (no banner beside it that could say
otherwise). Every run is its owner's: another person's id is not found."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from agent_app.history_import import import_runs_recover, import_upload
from sessions_app.models import ImportRun
from sessions_app.selectors import import_runs_for_owner

# Runs shown on the page, newest first.
RUNS_SHOWN = 5
# What a multipart body carries besides the file (boundaries, the other fields).
FORM_OVERHEAD = 64 * 1024


class ImportForm(forms.Form):
    source = forms.ChoiceField(choices=ImportRun.Source.choices)
    export = forms.FileField(help_text="the export's zip, or its conversations.json")
    learn = forms.BooleanField(required=False, initial=True)

    def clean_export(self):
        upload = self.cleaned_data["export"]
        limit = settings.ETHAN_IMPORT_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(_too_big(upload.size, limit))
        return upload


def _too_big(size: int, limit: int) -> str:
    return (
        f"文件太大 / The file is {size:,} bytes; the page takes up to {limit:,} "
        "(larger exports: `ethan import --from` at the console)"
    )


def run_progress(run: ImportRun) -> dict:
    """A run as the page shows it, and as its status URL answers."""
    return {
        "id": run.pk,
        "status": run.status,
        "file_name": run.file_name,
        "source": run.get_source_display(),
        "conversations_done": run.conversations_done,
        "conversations_total": run.conversations_total,
        "sessions_created": run.sessions_created,
        "messages_created": run.messages_created,
        "learn": run.learn,
        "learn_done": run.learn_done,
        "learn_total": run.learn_total,
        "conversations_skipped": run.conversations_skipped,
        "skipped": run.skipped,
        "error": run.error,
        "finished": run.finished,
    }


def _runs(request: HttpRequest) -> list[dict]:
    import_runs_recover(owner=request.user)
    runs = import_runs_for_owner(owner=request.user)
    return [run_progress(run) for run in runs.order_by("-created_at", "-pk")[:RUNS_SHOWN]]


@require_http_methods(["GET", "POST"])
@login_required
def import_page(request: HttpRequest) -> HttpResponse:
    form = ImportForm()
    status, refused = 200, ""
    if request.method == "POST":
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        limit = settings.ETHAN_IMPORT_MAX_BYTES
        if declared > limit + FORM_OVERHEAD:
            # Refused by its declared length: the body (which Django streams to a temporary
            # file, not memory) is never copied into the database.
            refused, status = _too_big(declared, limit), 413
        else:
            form = ImportForm(request.POST, request.FILES)
            if form.is_valid():
                upload = form.cleaned_data["export"]
                import_upload(
                    owner=request.user,
                    source=form.cleaned_data["source"],
                    file_name=upload.name,
                    learn=form.cleaned_data["learn"],
                    upload=b"".join(upload.chunks()),
                )
                return redirect("memory:import")
            status = 400
    context = {
        "tab": "sessions",
        "form": form,
        "refused": refused,
        "runs": _runs(request),
        "max_mb": settings.ETHAN_IMPORT_MAX_BYTES // 1_048_576,
    }
    return render(request, "channels_app/memory/import.html", context, status=status)


@require_GET
@login_required
def import_status(request: HttpRequest, run_id: int) -> JsonResponse:
    import_runs_recover(owner=request.user)
    run = get_object_or_404(import_runs_for_owner(owner=request.user), pk=run_id)
    return JsonResponse(run_progress(run))
