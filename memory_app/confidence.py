"""The confidence rules of the cold store (the design's "置信度机制"), in one place.

- A fact the consolidator extracts in the background starts at 0.8 (EXTRACTED).
- Strong signals from the user ("记住", "纠正", "偏好", "remember", "correct that",
  "I prefer") earn 0.9 to 0.95 (the extractor says which), only when told: a question that
  says them ("Do you remember where I live?", "你还记得我女儿叫什么吗？") asks, it tells
  nothing (ethan_llm.text.is_question, the offline model's rule too).
- A fact the agent writes with memory_write starts at 0.95 (AGENT_PROACTIVE).
- Finding the same fact again reinforces it: with c = max(old, new),
  c <- min(0.99, c + (1 - c) * 0.2), and hit_count + 1. Repeated evidence approaches
  certainty without ever claiming it.
- A fact that contradicts an active one supersedes it: the old row is kept with status
  superseded and a link to its successor; only the new one is injected.
- Each owner keeps at most ETHAN_FACT_CAPACITY (1,000) active facts; past that, the lowest
  confidence, least recently accessed facts are evicted (kept for audit, never injected).
- Injection takes active facts with confidence >= 0.3, highest confidence first, then the most
  recently used; 15 of them (5 on the fast path): the path's fact_limit, agent_app.paths.
"""

from collections.abc import Sequence

from ethan_llm.text import person_words, sentences, tells

EXTRACTED = 0.8
STRONG_SIGNAL = 0.9
AGENT_PROACTIVE = 0.95
REINFORCE_RATE = 0.2
CEILING = 0.99
INJECTION_THRESHOLD = 0.3


def reinforced(old: float, new: float) -> float:
    base = max(old, new)
    return round(min(CEILING, base + (1 - base) * REINFORCE_RATE), 4)


def from_importance(importance: float, *, said: Sequence[str] = ()) -> float:
    """The confidence of a background-extracted fact: 0.8, or 0.9-0.95 when the extractor
    marked a strong signal (importance >= 0.9). The rule, not the model, sets the range.

    `said`: what the person said that the fact came from (its source messages). When all of
    it asks (a question, a request) or is markup around other words (ethan_llm.text.person_words:
    a quoted transcript, an app's prompt), the signal was not the person's: 0.8."""
    if said and not any(tells(part) for text in said for part in sentences(person_words(text))):
        return EXTRACTED
    if importance >= STRONG_SIGNAL:
        return min(AGENT_PROACTIVE, round(importance, 2))
    return EXTRACTED
