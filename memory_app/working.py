"""Working memory: what of a conversation goes to the model on each turn (the design's
build_context), with one MemoryConfig for the console, the API and Lark."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from llm.types import Message as LLMMessage
from sessions_app.models import ChatSession, Message

LONG_TERM_LABEL = "[长期记忆]"
SUMMARY_LABEL = "[对话摘要]"
ACKNOWLEDGE = "好的。"


@dataclass(frozen=True)
class MemoryConfig:
    hot_size: int = 10  # rounds kept verbatim
    compress_batch: int = 5  # rounds summarised together once they leave the hot zone
    warm_capacity: int = 20  # rounds the warm summaries cover before extraction to the cold zone

    def __post_init__(self) -> None:
        if min(self.hot_size, self.compress_batch, self.warm_capacity) < 1:
            raise ValueError("hot_size, compress_batch and warm_capacity must be at least 1")


def memory_config() -> MemoryConfig:
    return MemoryConfig(
        hot_size=settings.ETHAN_MEMORY_HOT_SIZE,
        compress_batch=settings.ETHAN_MEMORY_COMPRESS_BATCH,
        warm_capacity=settings.ETHAN_MEMORY_WARM_CAPACITY,
    )


def hot_messages(*, session: ChatSession, hot_size: int) -> list[LLMMessage]:
    """The last `hot_size` rounds before the current input, verbatim, then the current input.

    A round starts at a user message. Only the conversation itself goes in (user messages and
    the assistant's replies): the tool traffic of earlier rounds stays in the database, its
    effect is in the replies and in memory, and leaving it out keeps the context portable
    between providers. Two queries, whatever the history size.
    """
    # User messages newest first: [0] is the current input, [1..hot_size] the hot rounds, so
    # [hot_size] is where the hot zone starts (all of it in a short conversation).
    oldest_hot = list(
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("-seq")
        .values_list("seq", flat=True)[hot_size : hot_size + 1]
    )
    start = oldest_hot[0] if oldest_hot else 0
    rows = (
        Message.objects.filter(session=session, seq__gte=start)
        .filter(role__in=[Message.Role.USER, Message.Role.ASSISTANT])
        .order_by("seq")
        .values_list("role", "content", "tool_calls")
    )
    messages = []
    for role, content, tool_calls in rows:
        if role == Message.Role.ASSISTANT and (tool_calls or not content):
            continue  # an intermediate step of a tool loop, not a reply
        messages.append(LLMMessage(role=role, content=content))
    return messages


def build_context(
    *,
    session: ChatSession,
    config: MemoryConfig | None = None,
    long_term: str = "",
    summary: str = "",
) -> list[LLMMessage]:
    """[user "[长期记忆]\\n…", assistant "好的。", user "[对话摘要]\\n…", assistant "好的。",
    the hot rounds…, the current input]. A block with nothing in it is left out together with
    its 好的。"""
    config = config or memory_config()
    context: list[LLMMessage] = []
    for label, text in ((LONG_TERM_LABEL, long_term), (SUMMARY_LABEL, summary)):
        if text.strip():
            context.append(LLMMessage.user(f"{label}\n{text.strip()}"))
            context.append(LLMMessage.assistant(ACKNOWLEDGE))
    context.extend(hot_messages(session=session, hot_size=config.hot_size))
    return context
