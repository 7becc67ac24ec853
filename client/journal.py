"""The old import path of the live-job journal, kept working: it moved to
`client.driver.journal` (the driver package). New code imports from there or from
`client.driver`."""

from client.driver.journal import (
    JOURNAL_FILE,
    NEEDS_LEASE_LOST,
    NEEDS_RECONCILE,
    PHASES,
    Journal,
    Phase,
    Record,
    Window,
    migrations,
    new_attempt_id,
)

__all__ = [
    "JOURNAL_FILE",
    "NEEDS_LEASE_LOST",
    "NEEDS_RECONCILE",
    "PHASES",
    "Journal",
    "Phase",
    "Record",
    "Window",
    "migrations",
    "new_attempt_id",
]
