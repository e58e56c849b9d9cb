"""The 我的画像 page: the whole user_profile.md, rendered and in an editor."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.shortcuts import redirect, render
from django.utils.html import format_html
from django.views import View
from markdown_it import MarkdownIt

from profile_app.markdown import TITLE, ProfileParseError
from profile_app.sections import SECTIONS
from profile_app.selectors import profile_markdown
from profile_app.services import profile_replace

# CommonMark with raw HTML off: the profile is the user's text, never markup we trust.
_MARKDOWN = MarkdownIt("commonmark", {"html": False})
# The English beside each heading the document has (title and sections), added to the page
# only: the stored Markdown keeps its Chinese headings, so its render/parse round-trip is exact.
_GLOSSES = {TITLE.removeprefix("# "): "User profile"} | {s.title: s.english for s in SECTIONS}


def _heading_close(self, tokens, idx, options, env) -> str:
    """A title or section heading ends with its gloss, as `<small class="gloss">`. Only the
    document's own headings are glossed: the user's `#` lines are escaped (markdown.py), and a
    heading of theirs inside a list or a quote is not at the top level."""
    closing = self.renderToken(tokens, idx, options, env)
    heading = tokens[idx]
    top = heading.tag in ("h1", "h2") and heading.level == 0
    gloss = _GLOSSES.get(tokens[idx - 1].content) if top else None
    if gloss is None:
        return closing
    return format_html(' <small class="gloss" lang="en">· {}</small>', gloss) + closing


_MARKDOWN.add_render_rule("heading_close", _heading_close)


class ProfilePage(LoginRequiredMixin, View):
    template_name = "profile_app/profile.html"

    def _page(self, request, editing: str | None = None, status: int = 200):
        """The stored profile rendered; the editor holds `editing` (what was just submitted)
        or the stored document."""
        stored = profile_markdown(owner=request.user)
        return render(
            request,
            self.template_name,
            {
                "markdown": stored if editing is None else editing,
                "rendered": _MARKDOWN.render(stored),
            },
            status=status,
        )

    def get(self, request):
        return self._page(request)

    def post(self, request):
        submitted = request.POST.get("markdown", "")
        try:
            notes = profile_replace(
                owner=request.user, markdown=submitted, actor=f"user:{request.user.get_username()}"
            )
        except ProfileParseError as exc:
            # Nothing was saved; the editor keeps what was typed so nothing is lost.
            messages.error(request, f"没有保存 / Not saved: {exc}")
            return self._page(request, editing=submitted, status=400)
        messages.success(request, "已保存 / Saved.")
        for note in notes:
            messages.info(request, note)
        return redirect("profile")
