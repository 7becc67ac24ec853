"""The `lane` command's exit codes and its usage error.

0 ok, 1 any other failure (including a ticket-level "no"), 2 usage error, 3 pre-provider error
(fail-closed: nothing may be submitted to the provider); 141, quietly, when the reader of
stdout went away (`lane history --json | head -1`); 130 interrupted.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_PRE_PROVIDER = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`lane ... | head -1`)
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A usage problem found after argument parsing (exit 2)."""


__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PRE_PROVIDER",
    "EXIT_USAGE",
    "UsageError",
]
