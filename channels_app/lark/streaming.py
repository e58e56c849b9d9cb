"""A Lark reply written as the model writes it: a card sent once the reply takes a while, then
updated in place, throttled, and shown whole at the end.

A reply the model finishes within ETHAN_LARK_CARD_SECONDS of its first words is sent as one
text message, as before: there is nothing to watch being written. A longer one opens a card
(a reply to the person's message) with the words so far and a cursor, and the card is updated
with the words written since, at most once per ETHAN_LARK_CARD_SECONDS (Lark allows 5 updates a
second per message), however many pieces the model sent in between; the last update shows the
whole reply, as stored, without the cursor.

Cards fall back to text. A card that cannot be sent (a Lark error code, a 4xx/5xx, no answer)
is not tried again: the whole reply goes as one text message at the end. A card that was sent
but whose update fails stops being updated while the model writes; at the end it is updated
once more with the whole reply, and if that fails too the whole reply goes as a text message
under the card, which keeps the words it had (the person has the full answer either way, and
no message is sent twice). A reply too long for a card (Lark's 30 KB) is handled the same way.

Each send and update is fenced like the turn's writes: made only while the event still holds
the worker's claim, checked by `fence` inside a transaction that stays open until Lark has
answered, so a sweep taking the event back waits for that update to finish, and a worker that
lost its claim never touches the card again (CardLost).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction

from channels_app.lark.client import LarkClient, LarkError, card_fits

log = logging.getLogger(__name__)

# Shown after the words while the model is still writing.
CURSOR = " ▍"
# Patched by tests to step time by hand.
clock = time.monotonic
sleep = time.sleep


class CardLost(Exception):
    """The worker's claim on the event was taken back: it must not touch the card again."""


@dataclass(kw_only=True)
class CardReply:
    """The reply to one Lark message as the turn writes it; feed it the turn's words
    (`write`), say when a tool step made them moot (`restart`), then `finish` with the reply."""

    client: LarkClient
    message_id: str  # the person's message, which the card answers
    idempotency_key: str  # the event id: the card is sent under "<key>-card"
    fence: Callable[[], bool]
    interval: float
    text: str = field(default="", init=False)  # the reply as written so far
    card_id: str | None = field(default=None, init=False)
    shown: str | None = field(default=None, init=False)  # what the card shows now
    refused: bool = field(default=False, init=False)  # a send or update failed: no live updates
    _first_words_at: float | None = field(default=None, init=False)
    _shown_at: float = field(default=0.0, init=False)

    def write(self, piece: str) -> None:
        """More of the reply: the card is sent, or updated, when the interval has passed."""
        self.text += piece
        now = clock()
        if self._first_words_at is None:
            self._first_words_at = now
            return
        if self.refused:
            return
        since = self._shown_at if self.card_id else self._first_words_at
        if now - since >= self.interval:
            self._shown_at = now
            self._show(self.text + CURSOR, retries=0)

    def finish(self, reply: str) -> bool:
        """Show the whole reply in the card; False when there is no card, or it could not be
        brought to show the reply: then the reply must be sent as text."""
        if self.card_id is None:
            return False
        if self.shown != reply:
            # The last update keeps to the interval too: right after the one before, it
            # could be the one too many in Lark's second.
            wait = self.interval - (clock() - self._shown_at)
            if wait > 0:
                sleep(wait)
            self._show(reply, retries=1)
        return self.shown == reply

    def _show(self, text: str, *, retries: int) -> None:
        if not card_fits(text):
            self._refuse("the reply is too long for a card")
            return
        # The fence's UPDATE keeps the event's row locked until Lark has answered.
        with transaction.atomic():
            if not self.fence():
                raise CardLost(self.message_id)
            try:
                if self.card_id is None:
                    if self.refused:
                        return
                    self.card_id = self.client.reply_card(
                        message_id=self.message_id,
                        text=text,
                        idempotency_key=f"{self.idempotency_key[:44]}-card",
                        retries=retries,
                    )
                else:
                    self.client.card_update(card_id=self.card_id, text=text, retries=retries)
            except (LarkError, KeyError, TypeError) as exc:
                self._refuse(str(exc))
                return
        self.shown = text

    def _refuse(self, why: str) -> None:
        if not self.refused:
            log.warning("lark reply to %s: the card stops being updated: %s", self.message_id, why)
        self.refused = True
