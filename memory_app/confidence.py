"""The confidence rules of the cold store (the design's "置信度机制"), in one place.

- A fact the consolidator extracts in the background starts at 0.8 (EXTRACTED).
- Strong signals from the user ("记住", "纠正", "偏好", "remember", "correct that",
  "I prefer") earn 0.9 to 0.95 (the extractor says which).
- A fact the agent writes with memory_write starts at 0.95 (AGENT_PROACTIVE).
- Finding the same fact again reinforces it: confidence = min(1, max(old, new) + 0.05) and
  hit_count + 1.
- Injection takes active facts with confidence >= 0.3, highest confidence first, then the most
  recently used; 15 of them (5 on the fast path).
"""

EXTRACTED = 0.8
STRONG_SIGNAL = 0.9
AGENT_PROACTIVE = 0.95
REINFORCE_STEP = 0.05
INJECTION_THRESHOLD = 0.3
INJECT_LIMIT = 15
INJECT_LIMIT_FAST = 5


def reinforced(old: float, new: float) -> float:
    return round(min(1.0, max(old, new) + REINFORCE_STEP), 4)
