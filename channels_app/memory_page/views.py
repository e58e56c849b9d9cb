"""我的记忆 (/memory/): one view per operation. Reads go through the layer apps' scoping
selectors (another person's id is not found: 404); every change is one call to the service the
REST API and the agent's tools use, with the actor `user:<username>`; a refusal
(ValidationError) is shown with its reason and nothing is changed."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote, urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.text import Truncator
from django.views.decorators.http import require_GET, require_POST

from channels_app.memory_page import selectors
from episodes_app.selectors import episodes_for_owner, episodes_search
from memory_app import selectors as memory_selectors
from memory_app import services as memory_services
from memory_app.models import Fact, FactEvent, Procedure
from memory_app.selectors import facts_for_owner
from oauth_app import scopes
from oauth_app import selectors as oauth_selectors
from oauth_app import services as oauth_services
from sessions_app import selectors as session_selectors
from sessions_app import services as session_services
from sessions_app.errors import SessionNotFound
from sessions_app.models import ChatSession, Message

PAGE_SIZE = 50
# Facts a page (the facts and new tabs): a row with its bar, source links and buttons is the
# page's main cost, so a page stays quick to render and to read (bench/memory_page.py).
FACTS_PAGE_SIZE = 25
# A session's messages, this many a page: a message's page follows from its seq (1, 2, 3…
# with no gaps), so a link to it needs no query.
MESSAGES_PAGE_SIZE = 200
# Search results shown at most (ranked, not paginated).
SEARCH_SHOWN = 50
QUERY_MAX_CHARS = 200

CATEGORY_LABELS = {
    Fact.Category.PREFERENCE: "偏好 / Preference",
    Fact.Category.DECISION: "决定 / Decision",
    Fact.Category.KNOWLEDGE: "知识 / Knowledge",
    Fact.Category.CORRECTION: "纠正 / Correction",
}
SOURCE_LABELS = {
    Fact.Source.CONSOLIDATOR: "后台整理 / Consolidator",
    Fact.Source.AGENT_PROACTIVE: "Ethan 主动记下 / The agent",
    Fact.Source.MCP: "MCP",
    Fact.Source.IMPORT: "导入 / Import",
    Fact.Source.ADMIN: "管理员 / Admin",
    Fact.Source.API: "你 / You",
}
STATUS_LABELS = {
    Fact.Status.ACTIVE: "记着 / Active",
    Fact.Status.EVICTED: "已忘记 / Forgotten",
    Fact.Status.SUPERSEDED: "已被取代 / Superseded",
    "all": "全部 / All",
}
SORT_LABELS = {
    "confidence": "可信度 / Confidence",
    "recent": "最新记住 / Newest",
    "used": "最近使用 / Last used",
}
EVENT_LABELS = {
    FactEvent.Kind.ADD: "记住 / Added",
    FactEvent.Kind.REINFORCE: "再次确认 / Reinforced",
    FactEvent.Kind.UPDATE: "更新 / Updated",
    FactEvent.Kind.SUPERSEDE: "被取代 / Superseded",
    FactEvent.Kind.EVICT: "忘记 / Forgotten",
    FactEvent.Kind.EDIT: "修改 / Edited",
}
ROLE_LABELS = {
    Message.Role.USER: "你 / You",
    Message.Role.ASSISTANT: "Ethan",
    Message.Role.TOOL: "工具 / Tool",
    Message.Role.SYSTEM: "系统 / System",
}


def _actor(request: HttpRequest) -> str:
    return f"user:{request.user.get_username()}"


def _reason(exc: ValidationError) -> str:
    return " ".join(exc.messages)


def _short(text: str, length: int = 60) -> str:
    return Truncator(text).chars(length)


def _back(request: HttpRequest, default: str) -> HttpResponse:
    """Back to the page the form was on (`next`: a path on this site), else `default`."""
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect(default)


def message_url(session_id: str, seq: int, sessions_root: str | None = None) -> str:
    """Where a message is shown: its session's page (the page of messages it is on), at it.
    `sessions_root` is reverse("memory:sessions"), given when many links are made at once."""
    root = sessions_root or reverse("memory:sessions")
    page = (seq - 1) // MESSAGES_PAGE_SIZE + 1
    query = f"?page={page}" if page > 1 else ""
    return f"{root}{quote(session_id)}/{query}#m{seq}"


def _when(moment: datetime | None) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else ""


def _decorate(facts: list[Fact]) -> list[Fact]:
    """What the templates show of each fact (read by memory_selectors.facts_shown), made here in one
    pass with no query: labels, the bar's width, times and links, each link from one reverse()
    for the page (a reverse per row and link was a third of a 50-row page's render time;
    bench/memory_page.py)."""
    facts_root = reverse("memory:facts")  # fact pages are <facts_root>facts/<id>/… (urls.py)
    sessions_root = reverse("memory:sessions")
    for fact in facts:
        fact.category_label = CATEGORY_LABELS.get(fact.category, fact.category)
        fact.source_label = SOURCE_LABELS.get(fact.source, fact.source)
        if fact.source_client:
            fact.source_label = f"{fact.source_label} · {fact.source_client}"
        fact.status_label = STATUS_LABELS.get(fact.status, fact.status)
        fact.confidence_percent = round(fact.confidence * 100)
        fact.confidence_text = f"{fact.confidence:.2f}"
        fact.last_used_text = _when(fact.last_accessed)
        fact.added_text = _when(fact.created_at)
        fact.url = f"{facts_root}facts/{fact.pk}/"
        said = fact.said_in
        if not said and fact.session_id and fact.message_seq:  # stored before `sources`
            said = [(fact.session_id, fact.message_seq, fact.message_said or "")]
        # (label, url, the start of what was said there): the turn a fact was learnt from is
        # shown beside its link, so it can be judged without opening the session.
        fact.links = [
            (
                f"{session_id} #{seq}",
                message_url(session_id, seq, sessions_root),
                _short(text, memory_selectors.SAID_EXCERPT_CHARS),
            )
            for session_id, seq, text in said
        ]
        if not said and fact.session_id:  # learnt in a session, no message named
            fact.links = [(fact.session_id, f"{sessions_root}{quote(fact.session_id)}/", "")]
    return facts


def _page(request: HttpRequest, items, size: int = PAGE_SIZE):
    return Paginator(items, size).get_page(request.GET.get("page"))


def _facts_page(request: HttpRequest, facts):
    """A page of facts: the paginator counts `facts`, the page's rows are read apart (two
    queries for any number of rows: memory_selectors.facts_shown)."""
    page = _page(request, facts, FACTS_PAGE_SIZE)
    rows = []
    if page.paginator.count:
        rows = memory_selectors.facts_shown(facts, page.start_index() - 1, page.end_index())
    page.object_list = _decorate(rows)
    return page


def _render(request: HttpRequest, template: str, tab: str, context: dict, status: int = 200):
    # `here`: where a form on the page sends the person back to (its `next`).
    context = {"tab": tab, "here": request.get_full_path(), **context}
    return render(request, f"channels_app/memory/{template}", context, status=status)


# ---- 记忆 / Facts ----------------------------------------------------------------------------


class FactFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=QUERY_MAX_CHARS)
    category = forms.ChoiceField(
        required=False, choices=[("", "全部类别 / All categories"), *CATEGORY_LABELS.items()]
    )
    source = forms.ChoiceField(
        required=False, choices=[("", "全部来源 / All sources"), *SOURCE_LABELS.items()]
    )
    status = forms.ChoiceField(
        required=False,
        choices=[(key, STATUS_LABELS[key]) for key in memory_selectors.FACT_STATUSES],
    )
    sort = forms.ChoiceField(required=False, choices=list(SORT_LABELS.items()))
    client = forms.CharField(required=False, max_length=90, widget=forms.HiddenInput)

    def filters(self) -> memory_selectors.FactFilters:
        """What was asked; a value that is not one of the choices is taken as not given."""
        self.is_valid()
        data = self.cleaned_data
        default = memory_selectors.FactFilters()
        return memory_selectors.FactFilters(
            query=(data.get("q") or "").strip(),
            category=data.get("category") or "",
            source=data.get("source") or "",
            status=data.get("status") or default.status,
            sort=data.get("sort") or default.sort,
            client=(data.get("client") or "").strip(),
        )


@require_GET
@login_required
def facts(request: HttpRequest) -> HttpResponse:
    form = FactFilterForm(request.GET)
    filters = form.filters()
    page = _facts_page(request, memory_selectors.facts_listed(owner=request.user, filters=filters))
    return _render(
        request,
        "facts.html",
        "facts",
        {"form": form, "filters": filters, "page_obj": page},
    )


def _fact_or_404(request: HttpRequest, fact_id: int) -> Fact:
    return get_object_or_404(facts_for_owner(owner=request.user), pk=fact_id)


def _fact_page(
    request: HttpRequest,
    fact: Fact,
    *,
    editing: str | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    fact = _decorate([memory_selectors.fact_shown(fact=fact)])[0]
    events = list(fact.events.order_by("created_at", "id"))
    for event in events:
        event.label = EVENT_LABELS.get(event.event, event.event)
        event.links = [
            (f"{s['session_id']} #{s['seq']}", message_url(s["session_id"], s["seq"]))
            for s in event.sources
            if isinstance(s, dict) and "session_id" in s and "seq" in s
        ]
    last = events[-1] if events else None
    sources = fact.sources.order_by("session_id", "seq")
    quotes = [
        (ROLE_LABELS.get(m.role, m.role), _short(m.content, 200), message_url(m.session_id, m.seq))
        for m in sources
    ]
    return _render(
        request,
        "fact.html",
        "facts",
        {
            "fact": fact,
            "events": events,
            "undoable": last is not None and last.event != FactEvent.Kind.ADD,
            "last_event": last,
            "quotes": quotes,
            "versions": _decorate(
                memory_selectors.facts_shown(memory_selectors.fact_versions(fact=fact))
            ),
            "successor": fact.superseded_by,
            "editing": fact.content if editing is None else editing,
            "error": error,
        },
        status=status,
    )


@require_GET
@login_required
def fact_detail(request: HttpRequest, fact_id: int) -> HttpResponse:
    return _fact_page(request, _fact_or_404(request, fact_id))


@require_POST
@login_required
def fact_edit(request: HttpRequest, fact_id: int) -> HttpResponse:
    fact = _fact_or_404(request, fact_id)
    submitted = request.POST.get("content", "")
    if " ".join(submitted.split()) == fact.content:
        messages.info(request, "没有改动 / Nothing changed.")
        return redirect("memory:fact", fact_id=fact.pk)
    was_active = fact.status == Fact.Status.ACTIVE
    try:
        fact = memory_services.fact_edit(fact=fact, actor=_actor(request), content=submitted)
    except ValidationError as exc:
        # Nothing was saved (the service refuses before writing); the editor keeps the text.
        return _fact_page(
            request,
            _fact_or_404(request, fact_id),
            editing=submitted,
            error=f"没有保存 / Not saved: {_reason(exc)}",
            status=400,
        )
    if was_active and fact.status == Fact.Status.SUPERSEDED:  # into a known fact's words
        messages.success(
            request,
            f"已与 #{fact.superseded_by_id} 合并 / Merged into #{fact.superseded_by_id}, the same "
            "fact you already had. 可以撤销 / You can undo it.",
        )
    else:
        messages.success(request, "已保存 / Saved. 可以撤销 / You can undo it.")
    return redirect("memory:fact", fact_id=fact.pk)


@require_POST
@login_required
def fact_forget(request: HttpRequest, fact_id: int) -> HttpResponse:
    fact = _fact_or_404(request, fact_id)
    memory_services.fact_forget(fact=fact, actor=_actor(request))
    messages.success(
        request,
        f"已忘记 / Forgotten: “{_short(fact.content)}” "
        "(在“已忘记”里可以撤销 / undo it under Forgotten).",
    )
    return _back(request, reverse("memory:facts"))


@require_POST
@login_required
def fact_undo(request: HttpRequest, fact_id: int) -> HttpResponse:
    fact = _fact_or_404(request, fact_id)
    try:
        fact = memory_services.fact_undo(fact=fact, actor=_actor(request))
    except ValidationError as exc:
        messages.error(request, f"没有撤销 / Not undone: {_reason(exc)}")
    else:
        messages.success(request, f"已撤销 / Undone: “{_short(fact.content)}”")
    return _back(request, reverse("memory:fact", args=[fact.pk]))


# ---- 新记住的 / New since you last looked ------------------------------------------------------


@require_GET
@login_required
def new(request: HttpRequest) -> HttpResponse:
    mark = memory_selectors.review_mark(owner=request.user)
    page = _facts_page(request, memory_selectors.facts_new(owner=request.user, mark=mark))
    return _render(
        request,
        "new.html",
        "new",
        {"page_obj": page, "mark": mark, "shown_at": timezone.now().isoformat()},
    )


@require_POST
@login_required
def fact_keep(request: HttpRequest, fact_id: int) -> HttpResponse:
    fact = _fact_or_404(request, fact_id)
    memory_services.fact_keep(fact=fact)
    messages.success(request, f"已保留 / Kept: “{_short(fact.content)}”")
    return _back(request, reverse("memory:new"))


@require_POST
@login_required
def new_keep_all(request: HttpRequest) -> HttpResponse:
    try:
        until = datetime.fromisoformat(request.POST.get("shown_at", ""))
    except ValueError:
        until = None
    if until is not None and timezone.is_naive(until):
        until = None
    memory_services.memory_review_all(owner=request.user, until=until)
    messages.success(request, "已全部保留 / All kept: 新记住的已看完 / review done.")
    return redirect("memory:new")


# ---- 规则 / Procedures -----------------------------------------------------------------------


def _procedure_or_404(request: HttpRequest, procedure_id: int) -> Procedure:
    return get_object_or_404(
        memory_selectors.procedures_for_owner(owner=request.user), pk=procedure_id
    )


def _procedures_page(
    request: HttpRequest,
    *,
    editing: Procedure | None = None,
    submitted: dict | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    owned = memory_selectors.procedures_for_owner(owner=request.user)
    page = _page(request, owned.order_by("created_at", "id"))
    procedures = list(page.object_list)
    for procedure in procedures:
        procedure.editing = editing is not None and procedure.pk == editing.pk
        procedure.form_rule = submitted["rule"] if procedure.editing else procedure.rule
        procedure.form_context = submitted["context"] if procedure.editing else procedure.context
    page.object_list = procedures
    return _render(
        request,
        "procedures.html",
        "procedures",
        {
            "page_obj": page,
            "active_count": owned.filter(active=True).count(),
            "capacity": settings.ETHAN_PROCEDURE_CAPACITY,
            "error": error,
        },
        status=status,
    )


@require_GET
@login_required
def procedures(request: HttpRequest) -> HttpResponse:
    return _procedures_page(request)


@require_POST
@login_required
def procedure_edit(request: HttpRequest, procedure_id: int) -> HttpResponse:
    procedure = _procedure_or_404(request, procedure_id)
    # A textarea sends its line breaks as CRLF: stored text has LF.
    submitted = {
        "rule": request.POST.get("rule", ""),
        "context": request.POST.get("context", "").replace("\r\n", "\n"),
    }
    changes = {}
    if " ".join(submitted["rule"].split()) != procedure.rule:
        changes["rule"] = submitted["rule"]
    if submitted["context"] != procedure.context:
        changes["context"] = submitted["context"]
    if not changes:
        messages.info(request, "没有改动 / Nothing changed.")
        return _back(request, reverse("memory:procedures"))
    try:
        memory_services.procedure_edit(procedure=procedure, **changes)
    except ValidationError as exc:
        return _procedures_page(
            request,
            editing=procedure,
            submitted=submitted,
            error=f"没有保存 / Not saved: {_reason(exc)}",
            status=400,
        )
    messages.success(request, f"已保存 / Saved: “{_short(procedure.rule)}”")
    return _back(request, reverse("memory:procedures"))


@require_POST
@login_required
def procedure_switch(request: HttpRequest, procedure_id: int) -> HttpResponse:
    procedure = _procedure_or_404(request, procedure_id)
    active = request.POST.get("active") == "on"
    try:
        memory_services.procedure_edit(procedure=procedure, active=active)
    except ValidationError as exc:
        messages.error(request, f"没有开启 / Not switched on: {_reason(exc)}")
    else:
        state = "已开启 / On" if active else "已关闭 / Off"
        messages.success(request, f"{state}: “{_short(procedure.rule)}”")
    return _back(request, reverse("memory:procedures"))


@login_required
def procedure_delete(request: HttpRequest, procedure_id: int) -> HttpResponse:
    """GET asks first; the POST of that page deletes."""
    procedure = _procedure_or_404(request, procedure_id)
    if request.method == "POST":
        memory_services.procedure_delete(procedure=procedure)
        messages.success(request, f"已删除 / Deleted: “{_short(procedure.rule)}”")
        return redirect("memory:procedures")
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    return _render(request, "procedure_delete.html", "procedures", {"procedure": procedure})


# ---- 情节 / Episodes -------------------------------------------------------------------------


class SearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=QUERY_MAX_CHARS)

    def query(self) -> str:
        return (self.cleaned_data.get("q") or "").strip() if self.is_valid() else ""


@require_GET
@login_required
def episodes(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET)
    query = form.query()
    if query:
        found = episodes_search(owner=request.user, query=query, limit=SEARCH_SHOWN)
        # A timeline of the matches: by date, as the whole list is.
        shown = sorted((item.episode for item in found), key=lambda e: (e.timestamp, e.pk))[::-1]
        page = None
    else:
        page = _page(request, episodes_for_owner(owner=request.user).order_by("-timestamp", "-id"))
        shown = list(page.object_list)
    return _render(
        request,
        "episodes.html",
        "episodes",
        {"form": form, "query": query, "episodes": shown, "page_obj": page},
    )


# ---- 会话 / Sessions -------------------------------------------------------------------------


def _session_or_404(request: HttpRequest, session_id: str) -> ChatSession:
    try:
        return session_selectors.session_get_for_owner(owner=request.user, session_id=session_id)
    except SessionNotFound:
        raise Http404("no such session") from None


@require_GET
@login_required
def sessions(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET)
    query = form.query()
    if query:
        shown = session_selectors.session_search(
            owner=request.user, query=query, limit=SEARCH_SHOWN
        )
        page = None
    else:
        owned = session_selectors.sessions_for_owner(owner=request.user)
        page = _page(request, owned.order_by("-updated_at", "-created_at"))
        shown = list(page.object_list)
    return _render(
        request,
        "sessions.html",
        "sessions",
        {"form": form, "query": query, "sessions": shown, "page_obj": page},
    )


@require_GET
@login_required
def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    session = _session_or_404(request, session_id)
    page = _page(request, session_selectors.session_messages(session=session), MESSAGES_PAGE_SIZE)
    shown = list(page.object_list)
    for message in shown:
        message.role_label = ROLE_LABELS.get(message.role, message.role)
    page.object_list = shown
    learnt = _decorate(
        memory_selectors.facts_shown(
            memory_selectors.facts_learnt_in(owner=request.user, session=session), 0, SEARCH_SHOWN
        )
    )
    return _render(
        request,
        "session.html",
        "sessions",
        {
            "session": session,
            "page_obj": page,
            "episode": episodes_for_owner(owner=request.user).filter(session=session).first(),
            "learnt": learnt,
        },
    )


@login_required
def session_delete(request: HttpRequest, session_id: str) -> HttpResponse:
    """GET asks first; the POST of that page deletes the session and its messages (its episode
    and the facts learnt in it stay)."""
    session = _session_or_404(request, session_id)
    if request.method == "POST":
        session_id = session.pk  # a deleted row forgets its id
        count = session_services.session_delete(session=session)
        messages.success(request, f"已删除 / Deleted: {session_id} ({count} 条消息 / messages)")
        return redirect("memory:sessions")
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    return _render(request, "session_delete.html", "sessions", {"session": session})


# ---- 已连接的应用 / Connected apps ---------------------------------------------------------------

SCOPE_LABELS = {
    scopes.READ: "读取 / Read",
    scopes.WRITE: "写入 / Write",
}


@require_GET
@login_required
def apps(request: HttpRequest) -> HttpResponse:
    """The apps (MCP hosts such as Claude or ChatGPT) the person connected by OAuth: when, last
    used, what each may do and what it wrote; Disconnect revokes its tokens at once."""
    facts_root = reverse("memory:facts")
    rows = selectors.connected_apps(owner=request.user)
    for row in rows:
        row.scope_labels = [SCOPE_LABELS.get(s, s) for s in row.connection.scopes]
        row.connected_text = _when(row.connection.connected_at)
        used = [c.last_used_at for c in row.connections if c.last_used_at is not None]
        row.used_text = _when(max(used)) if used else ""
        for connection in row.connections:
            connection.scope_labels = [SCOPE_LABELS.get(s, s) for s in connection.scopes]
            connection.connected_text = _when(connection.connected_at)
        wrote = {"source": Fact.Source.MCP, "client": row.name, "status": "all"}
        row.facts_url = f"{facts_root}?{urlencode(wrote)}"
    return _render(
        request,
        "apps.html",
        "apps",
        {"apps": rows, "capacity": settings.ETHAN_OAUTH_CLIENTS_PER_PERSON},
    )


@require_POST
@login_required
def app_disconnect(request: HttpRequest, connection_id: int) -> HttpResponse:
    """Disconnect the app: every connection of its host (each registration it made) ends."""
    for connection in oauth_selectors.host_connections(
        owner=request.user, connection_id=connection_id
    ):
        name = oauth_services.connection_end(connection=connection)
    messages.success(
        request,
        f"已断开 {name}：它不能再读写你的记忆。 / {name} is disconnected: it can no longer read or "
        "write your memory.",
    )
    return redirect("memory:apps")
