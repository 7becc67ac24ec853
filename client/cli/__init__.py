"""`lane` — the driver computer's CLI (docs/protocol.md#client-config,
docs/protocol.md#cli-exit-codes; docs/client.md). The console script is `client.cli:main`;
`python -m client.cli` runs the same.

| module | what |
|---|---|
| app.py | `main`: parse, dispatch, map errors to exit codes |
| parser.py | `build_parser`: every command and option |
| commands.py | status, acquire, heartbeat, release, receipt, cooldown, history |
| follow.py | await and trace (commands that stay with a ticket) |
| setup.py | setup and dashboard (enrolling this computer) |
| render.py | tables, JSON, stderr messages, secret redaction |
| exits.py | exit codes and `UsageError` |

`lane self-test` and `lane drill` run client/drill/.
"""

from __future__ import annotations

from client.cli.app import main
from client.cli.exits import (
    EXIT_BROKEN_PIPE,
    EXIT_FAIL,
    EXIT_OK,
    EXIT_PRE_PROVIDER,
    EXIT_USAGE,
    UsageError,
)
from client.cli.parser import build_parser

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_PRE_PROVIDER",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "main",
]
