"""The model names a chat app picks from (GET /v1/models), and what each one means.

    ethan                      Ethan at work, on the model the session already uses, else the
                               person's own default (turn.model_choose)
    ethan-companion            the companion mode (苏念), the same model choice
    ethan/<model>              Ethan at work on that model: ethan/claude-sonnet-4-6,
                               ethan/gpt-5, ethan/gemini-2.5-flash, ethan/offline …
    ethan-companion/<model>    the companion mode on that model
    ethan-plain[/<model>]      the model with no memory: nothing injected, nothing stored (a
                               chat app's task model, for its titles, tags and follow-ups)

Any model id Ethan can reach works after the slash; /v1/models lists the ones that have a key
here. The memory, the tools and the stored session are the same whichever name is picked.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

import ethan_llm
from agent_app.turn import owner_model
from ethan_llm.config import DEFAULT_MODELS, current
from sessions_app.models import ChatSession

WORK_NAME = "ethan"
COMPANION_NAME = "ethan-companion"
PLAIN_NAME = "ethan-plain"
MODES = {
    WORK_NAME: ChatSession.Mode.WORK,
    COMPANION_NAME: ChatSession.Mode.COMPANION,
    PLAIN_NAME: ChatSession.Mode.WORK,
}


class UnknownModelName(LookupError):
    """Not one of the names above, or a model this server cannot reach (a 404)."""


@dataclass(frozen=True)
class ModelName:
    mode: str
    model: str | None  # None: the session's model, else the person's default
    plain: bool = False  # no memory (PLAIN_NAME)

    def label(self, model: str) -> str:
        """The name of what answered, in the same scheme (a client may pin it)."""
        if self.plain:
            return f"{PLAIN_NAME}/{model}"
        prefix = COMPANION_NAME if self.mode == ChatSession.Mode.COMPANION else WORK_NAME
        return f"{prefix}/{model}"


def model_name_parse(name: str) -> ModelName:
    """`ethan`, `ethan-companion`, `ethan/<model>` or `ethan-companion/<model>`; raises
    UnknownModelName, with the reason, for anything else."""
    prefix, slash, model = name.strip().partition("/")
    if prefix not in MODES or (slash and not model.strip()):
        raise UnknownModelName(
            f"the model {name!r} does not exist: use ethan, ethan-companion, ethan-plain, "
            "ethan/<model> or ethan-companion/<model> (GET /v1/models lists them)"
        )
    plain = prefix == PLAIN_NAME
    if not slash:
        return ModelName(mode=MODES[prefix], model=None, plain=plain)
    try:
        ethan_llm.check_model(model.strip())  # unknown, or no key for its provider here
    except ethan_llm.ModelConfigError as exc:
        raise UnknownModelName(f"the model {name!r} is not available here: {exc}") from None
    return ModelName(mode=MODES[prefix], model=model.strip(), plain=plain)


def model_names(owner: AbstractBaseUser) -> list[str]:
    """Every name this person can use now: the two modes, then each reachable model (theirs,
    ETHAN_MODEL's, each provider's default that has a key, the offline model)."""
    candidates = [owner_model(owner), current().model, *(m for _, m in DEFAULT_MODELS)]
    candidates.append(ethan_llm.default_model())
    candidates.append("offline")
    reachable: list[str] = []
    for model in candidates:
        if not model or model in reachable:
            continue
        try:
            ethan_llm.check_model(model)
        except ethan_llm.ModelConfigError:
            continue
        reachable.append(model)
    names = [WORK_NAME, COMPANION_NAME]
    names += [f"{WORK_NAME}/{model}" for model in reachable]
    names += [f"{COMPANION_NAME}/{model}" for model in reachable]
    # Last: a chat app's task model, picked on purpose, never by a person by mistake.
    names.append(PLAIN_NAME)
    return names
