"""The seven sections of user_profile.md, in order, by Chinese title and by ASCII key, each
with an English gloss the pages show beside its title (never written into the document)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    english: str  # the gloss beside the title on the pages
    purpose: str


SECTIONS: tuple[Section, ...] = (
    Section(
        "basic",
        "基础特征",
        "Basics",
        "name, age, character, interests: stable traits the user gives",
    ),
    Section("identity", "身份与背景", "Identity and background", "occupation, region, role"),
    Section("goals", "目标与方向", "Goals and direction", "long-term goals, current focus"),
    Section(
        "work_style",
        "工作与沟通方式",
        "Work and communication",
        "preferred communication style, working rhythm",
    ),
    Section(
        "psych",
        "心理与情绪",
        "Mind and mood",
        "emotional patterns, stressors, what soothes, values",
    ),
    Section(
        "language",
        "个人语言与激励",
        "Personal language and motivation",
        "the user's own words, motivating phrases",
    ),
    Section(
        "agreements",
        "与 Agent 的约定",
        "Agreements with Ethan",
        "agreements with the agent for given situations",
    ),
)
BY_KEY = {section.key: section for section in SECTIONS}
BY_TITLE = {section.title: section for section in SECTIONS}
# Titles also match without spaces ("与Agent的约定").
_LOOSE = {section.title.replace(" ", "").lower(): section for section in SECTIONS}


def section_for(name: str) -> Section:
    """A section by ASCII key or Chinese title; ValueError lists the valid names."""
    cleaned = (name or "").strip()
    section = (
        BY_KEY.get(cleaned.lower())
        or BY_TITLE.get(cleaned)
        or _LOOSE.get(cleaned.replace(" ", "").lower())
    )
    if section is None:
        valid = ", ".join(f"{s.key} ({s.title})" for s in SECTIONS)
        raise ValueError(f"unknown profile section {name!r}: use one of {valid}")
    return section
