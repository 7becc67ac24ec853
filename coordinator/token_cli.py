"""`lane-coordinator token add|list|revoke`: the token file's credentials
(docs/operator.md#credentials).

`add` makes a token, prints it once (stdout, alone: `TOKEN=$(lane-coordinator token add …)`)
and appends only its hash; `list` prints names, roles and machines, never a secret; `revoke`
removes one credential's line. The file is rewritten whole (a temporary file in the same
folder, 0600, fsynced, renamed over it): a reader never sees half a file, and the server
reading it on SIGHUP gets the old one or the new one."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
from pathlib import Path

from coordinator.credentials import (
    NAME_RE,
    Credential,
    Role,
    exposure,
    hashed_line,
    parse_credentials,
)
from coordinator.errors import ConfigError
from coordinator.protocol.names import MACHINE_RE

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, 256 random bits
RELOAD_HINT = (
    "reload every server that reads this file: systemctl reload lane-coordinator "
    "(or kill -HUP <pid>); each replica reloads its own"
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("token", help="add, list or revoke credentials in a token file")
    tsub = t.add_subparsers(dest="token_command", required=True)
    a = tsub.add_parser("add", help="make a credential: prints its token once, stores its hash")
    a.add_argument("name", help="unique name, recorded with every write (1-64 of [A-Za-z0-9._-])")
    a.add_argument("--role", required=True, choices=[r.value for r in Role],
                   help="reader: reads only; driver: a driver's calls; admin: all")  # fmt: skip
    a.add_argument("--machine", default=None,
                   help="driver only: the one machineId it may name (default: any)")  # fmt: skip
    a.add_argument("--token-file", type=Path, required=True, metavar="FILE",
                   help="the server's token file (created 0600 when missing)")  # fmt: skip
    ls = tsub.add_parser("list", help="names, roles and machines (never a secret)")
    ls.add_argument("--token-file", type=Path, required=True, metavar="FILE",
                    help="the server's token file")  # fmt: skip
    r = tsub.add_parser("revoke", help="remove a credential's line")
    r.add_argument("name", help="the credential's name (see `token list`)")
    r.add_argument("--token-file", type=Path, required=True, metavar="FILE",
                   help="the server's token file")  # fmt: skip


def token_cmd(args: argparse.Namespace) -> int:
    if args.token_command == "add":
        return _add(args.token_file, args.name, Role(args.role), args.machine)
    if args.token_command == "list":
        return _list(args.token_file)
    return _revoke(args.token_file, args.name)


def _read(path: Path, *, missing_ok: bool) -> tuple[str, list[Credential]]:
    """The file's text and credentials (none for a missing or empty file when `missing_ok`);
    ConfigError for a file others may read, or one with problems (fix it first)."""
    if not path.exists():
        if missing_ok:
            return "", []
        raise ConfigError(f"token: {path} does not exist")
    wide = exposure(path)
    if wide is not None:
        raise ConfigError(f"token: {wide}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"token: cannot read {path}: {exc}") from exc
    if not any(ln.strip() and not ln.strip().startswith("#") for ln in text.splitlines()):
        return text, []
    return text, parse_credentials(text, source=str(path))


def _write(path: Path, text: str) -> None:
    """`text` as the whole file, 0600, atomically (keeps the owner when it can)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        if path.exists():
            st = path.stat()
            with contextlib.suppress(PermissionError):
                os.fchown(fd, st.st_uid, st.st_gid)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _add(path: Path, name: str, role: Role, machine: str | None) -> int:
    if not NAME_RE.fullmatch(name):
        raise ConfigError(f"token add: NAME must be 1-64 of [A-Za-z0-9._-], got {name!r}")
    if machine is not None and role is not Role.DRIVER:
        raise ConfigError(f"token add: --machine binds a driver credential; a {role} has none")
    if machine is not None and not MACHINE_RE.fullmatch(machine):
        raise ConfigError(f"token add: --machine must be 1-64 of [A-Za-z0-9._-], got {machine!r}")
    text, creds = _read(path, missing_ok=True)
    if any(c.name == name for c in creds):
        raise ConfigError(
            f"token add: {path} already has a credential named {name!r}; names are unique "
            f"(rotate: token revoke {name}, then token add {name})"
        )
    token = secrets.token_urlsafe(TOKEN_BYTES)
    if text and not text.endswith("\n"):
        text += "\n"
    _write(path, text + hashed_line(token, name, role, machine) + "\n")
    print(token)
    bound = f", machine {machine}" if machine else ""
    use = {
        Role.DRIVER: "on that computer, paste it into `lane setup` (or set LANE_TOKEN)",
        Role.READER: "paste it into the control room's unlock box (or set LANE_READ_TOKEN)",
        Role.ADMIN: "keep it for the operators' own calls",
    }[role]
    print(
        f"added credential {name!r} (role {role}{bound}) to {path}; the token above is shown "
        f"once and only its hash is stored: {use}. Then {RELOAD_HINT}.",
        file=sys.stderr,
    )
    return 0


def _list(path: Path) -> int:
    _, creds = _read(path, missing_ok=False)
    rows = [("NAME", "ROLE", "MACHINE", "FORM")]
    for c in creds:
        form = "plain (hash it: token add, then revoke this one)" if c.plain else "hashed"
        rows.append((c.name, c.role.value, c.machine or "-", form))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[3])
    return 0


def _revoke(path: Path, name: str) -> int:
    text, creds = _read(path, missing_ok=False)
    found = next((c for c in creds if c.name == name), None)
    if found is None:
        names = ", ".join(c.name for c in creds) or "none"
        raise ConfigError(f"token revoke: no credential named {name!r} in {path} (it has: {names})")
    if len(creds) == 1:
        raise ConfigError(
            f"token revoke: {name!r} is the last credential in {path}: a server refuses a file "
            "with none (and keeps the tokens it has); add another first"
        )
    lines = text.splitlines(keepends=True)
    del lines[found.line - 1]
    _write(path, "".join(lines))
    renamed = ""
    if found.plain:
        renamed = " (plain tokens are named by their order: the later ones are renumbered)"
    print(f"revoked {name!r} (role {found.role}) from {path}{renamed}; {RELOAD_HINT}: the "
          "token is accepted until then", file=sys.stderr)  # fmt: skip
    return 0
