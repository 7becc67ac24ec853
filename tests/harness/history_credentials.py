"""Rule (f) of the history checker (tests/harness/history.py): every acknowledged write names
the credential that made it (docs/protocol.md#credentials).

- An acknowledged acquire that made its ticket (`duplicate: false`) recorded the attempt's
  credential on it: the server's row (live in the status, ended in the history) names it in
  `credential`.
- An acknowledged release with `released: true` made the ticket done: its history row names
  the attempt's credential in `releasedBy`.

An attempt recorded without a credential (`Entry.credential` None) is not checked, nor a row
the view does not hold (rule (a) reports a lost one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.harness.history import Entry, LaneView


def check_credentials(view: LaneView, acked: Sequence[Entry], violations: list[str]) -> None:
    rows: dict[str, dict[str, Any]] = {}
    for row in [*view.held, *view.queued, *view.history]:
        rows.setdefault(str(row.get("ticketId")), row)
    ended = {str(r.get("ticketId")): r for r in view.history}
    for e in acked:
        tid, reply = e.ticket_id, e.reply
        if e.credential is None or tid is None or reply is None:
            continue
        if e.op == "acquire" and reply.get("duplicate") is False and tid in rows:
            has = rows[tid].get("credential")
            if has != e.credential:
                violations.append(
                    f"{view.lane}: {e.describe()} made {tid} with credential "
                    f"{e.credential!r}; the server's row names {has!r}"
                )
        if e.op == "release" and reply.get("released") is True and tid in ended:
            has = ended[tid].get("releasedBy")
            if has != e.credential:
                violations.append(
                    f"{view.lane}: {e.describe()} released {tid} with credential "
                    f"{e.credential!r}; the server's row names releasedBy {has!r}"
                )
