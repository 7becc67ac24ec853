"""The lane core's commands (coordinator/engine/commands.py): immutable values, equal when
their fields are, usable as keys, with no per-instance dict."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.engine.commands import (
    Acquire,
    Cooldown,
    Heartbeat,
    RecordReceipt,
    Release,
    TicketCall,
)

CALL = TicketCall(machine_id="mA", claim_id="cA", ticket_id="t_0001")
COMMANDS: list[object] = [
    Acquire("mA", "cA", "p", "s1", "h", None, "t_0001"),
    CALL,
    Heartbeat(CALL, 30.0),
    Release(CALL, "completed", "job-1", None),
    Cooldown(CALL, "provider-human-check", 60.0),
    RecordReceipt("mA", "cA", "t_0001", "r1", "lease-acquired", "{}", "sha256:a", "sha256:a"),
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: type(c).__name__)
def test_a_command_cannot_be_changed_after_it_is_made(cmd: object) -> None:
    field = dataclasses.fields(cmd)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cmd, field, "other")


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: type(c).__name__)
def test_a_command_equals_and_hashes_as_its_copy(cmd: object) -> None:
    copy = dataclasses.replace(cmd)  # type: ignore[type-var]
    assert copy == cmd and copy is not cmd
    assert {cmd: 1}[copy] == 1
    assert not hasattr(cmd, "__dict__")  # slots: no per-instance dict


def test_commands_differing_in_one_field_are_different() -> None:
    a = Heartbeat(CALL, 30.0)
    assert a != Heartbeat(CALL, 31.0)
    assert a != Heartbeat(dataclasses.replace(CALL, claim_id=None), 30.0)
    assert Release(CALL, None, None, None).outcome is None
