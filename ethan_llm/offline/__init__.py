"""The offline model: Ethan's embedded default when no provider key is set.

It is a deterministic heuristic, not a language model. Same input, same output; it is meant to
keep every code path of the memory system working on a laptop with no key (and in tests):

- chat: a brief answer. An explicit memory instruction becomes the matching tool call, when that
  tool is offered ("记住…"/"remember that…" → memory_write; "我叫…"/"my name is…" and
  "我的目标是…"/"my goal is…" → profile_update; an instruction addressed to the assistant →
  procedure_write: "以后/今后/从现在起" followed by a directive ("以后不要用韩语",
  "以后用中文回答我"; not "以后我会早点睡"), or "from now on/going forward/always/never"
  followed by an imperative verb ("always reply in English", "never use emoji", "from now
  on, don't use emoji"; not "Always a pleasure to talk to you" or "Never mind, forget it")).
  After the tool results it confirms what it stored. A question (ethan_llm.text.is_question) is
  never an instruction, and a request about the person ("Tell me about my daughter") is asked
  as a question is: "What do you remember about me?" writes nothing. A question about
  the person is answered from memory, in their language and the second person: the
  <memory_context> fact that answers it ("Where do I live?" → "You told me you live in
  Lisbon.", "你说过你住在里斯本。"; "What do you remember about me?" lists ten at most), else a
  memory_search call, answered on the next step from its result: a fact, or the best past
  message the person wrote with its day ("On 3 December you said: …"). Anything else gets a
  short acknowledgement.

Every completion says {"offline": True} in its meta; usage is our token estimate.

Its memory work (OfflineMemory, ethan_llm.memory's MemoryModel) is computed from the rounds
themselves, never from a prompt:

- summarize: an extractive summary: the first sentence of each user turn (signal sentences first),
  in the conversation's language.
- fold: the items of the earlier and newer summaries merged, duplicates dropped, newest kept.
- extract: facts found by patterns, with categories and the design's confidences (0.8; 0.9 for
  偏好/纠正/I prefer/correct that; 0.95 for 记住/remember), each with the user turn it is in
  (its provenance), and in companion mode the user's feelings for the profile's 心理与情绪
  section. Plain self-statements count at 0.8 with no signal word: who the person is and what
  they do ("我在杭州做后端工程师", "I work at Acme"), where they live, the people and pets in
  their life ("我女儿叫小米", "my dog Max"), plans ("我要去东京出差", "I'm going to learn
  Japanese", "I'm planning a trip to Kyoto next March"), moves, jobs, allergies ("I moved to
  Porto", "我对花生过敏"). A question or a request ("Tell me about my daughter") is never a
  fact; it reads only the person's words (ethan_llm.text.person_words, through
  ethan_llm.memory.turns_of),
  and writes facts in the third person in both languages ("The user lives in Lisbon", "用户住在
  杭州"); the consolidator dates their relative times (ethan_llm.text.dated). It does not judge
  against known facts: the consolidator's rules do (with ethan_llm.text.fact_slot: "I moved to
  Porto"
  supersedes "I live in Lisbon").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ethan_llm.offline.chat import OfflineProvider, memory_context_facts
from ethan_llm.offline.facts import extract
from ethan_llm.offline.summary import fold, summarize
from ethan_llm.text import language_of, render_fold_input
from ethan_llm.types import Consolidation, Extraction, SessionsConsolidation, Turn

__all__ = ["OfflineMemory", "OfflineProvider", "memory_context_facts"]


class OfflineMemory:
    """Summaries, facts and rolling summaries computed from the rounds themselves, with no
    language model: the same rounds always give the same strings. Only what the user said is
    read; the assistant's replies add nothing the user told about themselves."""

    def summarize(self, turns: Sequence[Turn]) -> str:
        return summarize(_user_texts(turns))

    def extract(self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool) -> Extraction:
        # It does not judge against `known`: every fact is an ADD, and the consolidator's
        # documented rules decide what it means (judged=False). It knows each fact's source
        # turn directly: the user turn the sentence is in.
        numbers = [n for n, turn in enumerate(turns, start=1) if turn.role == "user"]
        facts, feelings = extract(_user_texts(turns), psych=psych, numbers=numbers)
        return Extraction(facts=facts, psych=feelings, judged=False)

    def consolidate(
        self, turns: Sequence[Turn], *, known: Sequence[str], psych: bool, extract_from: int
    ) -> Consolidation:
        # Its summarize and its extract: the summary reads every turn, the extraction those
        # from extract_from on, its turn numbers shifted back to count among all of them.
        skipped = max(0, extract_from - 1)
        extraction = self.extract(turns[skipped:], known=known, psych=psych)
        facts = tuple(
            replace(fact, turns=tuple(n + skipped for n in fact.turns)) for fact in extraction.facts
        )
        return Consolidation(
            summary=self.summarize(turns),
            extraction=Extraction(facts=facts, psych=extraction.psych, judged=False),
        )

    def consolidate_sessions(
        self, sessions: Sequence[Sequence[Turn]], *, known: Sequence[str], psych: bool
    ) -> SessionsConsolidation:
        # Each session summarised alone, the facts of all of them numbered across them.
        every = [turn for turns in sessions for turn in turns]
        extraction = self.extract(every, known=known, psych=psych)
        return SessionsConsolidation(
            summaries=tuple(self.summarize(turns) for turns in sessions), extraction=extraction
        )

    def fold(self, *, rolling: str, summaries: Sequence[str]) -> str:
        # The language is judged over the input as a language model would read it, section
        # labels included, as it always was: the same summaries fold into the same language.
        # (Over the summaries alone, mixed Chinese and English near the threshold would flip.)
        zh = language_of(render_fold_input(rolling=rolling, summaries=summaries)) == "zh"
        return fold([rolling, *summaries], zh=zh)


def _user_texts(turns: Sequence[Turn]) -> list[str]:
    """What the user said, turn by turn, every line break a plain newline."""
    return ["\n".join(turn.text.splitlines()) for turn in turns if turn.role == "user"]
