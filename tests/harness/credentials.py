"""Credentials for tests (docs/protocol.md#credentials): a named token with its role and
machine (`Cred`), and the token-file text of several (`token_file_text`: their hashed lines,
plus plain tokens, which the server reads as admin `token-1`, `token-2`, …)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.credentials import Role, hashed_line
from tests.harness.config import new_token


@dataclass(frozen=True)
class Cred:
    """One credential: its name, role, machine and (fresh unless given) token."""

    name: str
    role: str
    machine: str | None = None
    token: str = field(default_factory=new_token)

    @property
    def line(self) -> str:
        """Its token-file line: only the token's hash."""
        return hashed_line(self.token, self.name, Role(self.role), self.machine)


def token_file_text(creds: Sequence[Cred], plain: Sequence[str] = ()) -> str:
    """A token file holding `creds` (hashed) and the `plain` tokens, one per line."""
    return "".join(f"{line}\n" for line in [*(c.line for c in creds), *plain])


def write_credentials(path: Path, creds: Sequence[Cred], plain: Sequence[str] = ()) -> Path:
    """A private (0600) token file holding `creds` and `plain`; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token_file_text(creds, plain), encoding="utf-8")
    path.chmod(0o600)
    return path
