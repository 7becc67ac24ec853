"""Credentials: who may do what, and as which machine (docs/protocol.md#credentials).

The token file (`--token-file`) and LANE_COORDINATOR_TOKEN hold one credential per line; blank
lines and `#` comments (a whole line, or after whitespace at a line's end) are ignored:

    sha256:<64 hex of the token>  name=studio-a      role=driver  machine=studio-a
    sha256:<64 hex>               name=control-room  role=reader
    <plain token>                 (the older form: role admin, named token-1, token-2, ...)

Only the hash of a token need be stored. A presented token is hashed once (SHA-256) and its
digest looked up in a dict, then compared in constant time: the cost is the same whatever the
number of lines and whether or not the token shares a prefix with a real one (a prefix of a
token says nothing of its digest). A problem is reported by line number and never echoes a
line: the line may be a plain token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from coordinator import constants as C
from coordinator.errors import ConfigError
from coordinator.protocol.names import MACHINE_RE

TOKEN_ENV = "LANE_COORDINATOR_TOKEN"
HOW_TO_MAKE_TOKEN = (
    "make one with: lane-coordinator token add NAME --role admin|driver|reader "
    "[--machine ID] --token-file PATH (it prints the token once and stores its hash), or "
    "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' as a plain token in "
    f"{TOKEN_ENV} or --token-file PATH (one credential per line; two while rotating)"
)
HASH_PREFIX = "sha256:"
NAME_PATTERN = r"[A-Za-z0-9._-]{1,64}"
NAME_RE = re.compile(NAME_PATTERN)
_HEX_RE = re.compile(r"[0-9a-fA-F]{64}")
_KEY_RE = re.compile(r"[a-z]{1,16}")
_FIELDS = ("name", "role", "machine")
PLAIN_NAME = "token-{n}"


class Role(StrEnum):
    READER = "reader"  # every GET under /v1, /metrics, status and history
    DRIVER = "driver"  # what a driver does (acquire ... reconcile), and a reader's reads
    ADMIN = "admin"  # everything, for any machine


_RANK = {Role.READER: 0, Role.DRIVER: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Credential:
    """One line of the token file. `digest`: SHA-256 of the token (never shown: for a token
    a person chose it could be guessed back)."""

    name: str
    role: Role
    machine: str | None = None
    digest: bytes = field(default=b"", repr=False, compare=False)
    plain: bool = False  # the older plain-token form (role admin)
    line: int = 0  # where it is in its file (0: the environment)

    @property
    def can_write(self) -> bool:
        return self.role is not Role.READER

    def allows(self, needed: Role) -> bool:
        """The credential's role includes `needed`."""
        return _RANK[self.role] >= _RANK[needed]


def token_digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def hashed_line(token: str, name: str, role: Role, machine: str | None) -> str:
    """The token file line of a new credential (only its hash)."""
    hexdigest = token_digest(token.encode("utf-8")).hex()
    bound = f" machine={machine}" if machine else ""
    return f"{HASH_PREFIX}{hexdigest} name={name} role={role.value}{bound}"


_NOBODY = Credential("", Role.READER, digest=bytes(32))


class Credentials:
    """The accepted credentials; `replace` swaps in a reloaded set (SIGHUP) at once."""

    def __init__(self, creds: Iterable[Credential] = ()) -> None:
        self._by_digest: Mapping[bytes, Credential] = {}
        self.replace(creds)

    def replace(self, creds: Iterable[Credential]) -> None:
        items = tuple(creds)
        self.all = items
        self._by_digest = {c.digest: c for c in items}  # one assignment: readers see either

    def __len__(self) -> int:
        return len(self.all)

    @property
    def plain(self) -> int:
        """How many are plain-token lines (the older form)."""
        return sum(1 for c in self.all if c.plain)

    def authenticate(self, presented: bytes) -> Credential | None:
        """The credential whose token `presented` is, or None: one hash, one dict lookup,
        one constant-time comparison of digests."""
        digest = token_digest(presented)
        found = self._by_digest.get(digest, _NOBODY)
        same = hmac.compare_digest(found.digest, digest)
        return found if same and found is not _NOBODY else None


# ---------------------------------------------------------------- parsing


def _strip_comment(line: str) -> str:
    """A line without its comment: a `#` that starts the line or follows whitespace."""
    s = line.strip()
    if s.startswith("#"):
        return ""
    m = re.search(r"\s#", s)
    return s[: m.start()].rstrip() if m else s


def _hashed(n: int, fields: list[str], problems: list[str]) -> Credential | None:
    where = f"line {n}"
    hexpart = fields[0][len(HASH_PREFIX) :]
    ok = True
    if not _HEX_RE.fullmatch(hexpart):
        problems.append(f"{where}: a bad hash: sha256: must be followed by 64 hex digits")
        ok = False
    values: dict[str, str] = {}
    for f in fields[1:]:
        key, eq, value = f.partition("=")
        if not eq:
            problems.append(f"{where}: a field that is not key=value (not shown: a token?)")
            ok = False
        elif key not in _FIELDS:
            shown = repr(key) if _KEY_RE.fullmatch(key) else "(not shown)"
            problems.append(f"{where}: unknown field {shown}; known: name, role, machine")
            ok = False
        elif key in values:
            problems.append(f"{where}: {key}= given twice")
            ok = False
        else:
            values[key] = value
    name, role, machine = values.get("name"), values.get("role"), values.get("machine")
    if name is None or not NAME_RE.fullmatch(name):
        problems.append(f"{where}: name= is required: 1-64 of [A-Za-z0-9._-]")
        ok = False
    if role not in {r.value for r in Role}:
        problems.append(f"{where}: role= is required: reader, driver or admin")
        ok = False
    if machine is not None and not MACHINE_RE.fullmatch(machine):
        problems.append(f"{where}: machine= must be 1-64 of [A-Za-z0-9._-]")
        ok = False
    if machine is not None and role in (Role.READER.value, Role.ADMIN.value):
        problems.append(
            f"{where}: machine= is only for a driver credential (a {role} is bound to none)"
        )
        ok = False
    if not ok or name is None or role is None:
        return None
    return Credential(name, Role(role), machine, bytes.fromhex(hexpart), line=n)


def _plain(n: int, token: str, problems: list[str]) -> bytes | None:
    b = token.encode("utf-8")
    if len(b) < C.MIN_TOKEN_BYTES:
        where = f"line {n}: a" if n else "a"
        problems.append(
            f"{where} plain token is {len(b)} bytes; at least {C.MIN_TOKEN_BYTES} are required"
        )
        return None
    return b


def parse_credentials(text: str, *, source: str, env: bool = False) -> list[Credential]:
    """Every credential of a token file's text (`env`: LANE_COORDINATOR_TOKEN's, where a line
    of plain tokens may hold several, separated by whitespace or commas). ConfigError naming
    `source` and every problem by line."""
    problems: list[str] = []
    creds: list[Credential] = []
    plain_count = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line:
            continue
        fields = line.split()
        if fields[0].startswith(HASH_PREFIX):
            cred = _hashed(n, fields, problems)
            if cred is not None:
                creds.append(cred)
            continue
        if env:
            tokens = line.replace(",", " ").split()
        elif len(fields) > 1:
            problems.append(
                f"line {n}: a plain token line holds one token and nothing else (or write "
                f"{HASH_PREFIX}<hex> name=NAME role=ROLE)"
            )
            continue
        else:
            tokens = fields
        for token in tokens:
            plain_count += 1
            b = _plain(0 if env else n, token, problems)
            if b is not None:
                name = PLAIN_NAME.format(n=plain_count)
                creds.append(Credential(name, Role.ADMIN, None, token_digest(b), True, n))
    _duplicates(creds, problems)
    if problems:
        raise ConfigError(f"token: {source}: " + "; ".join(problems) + f"; {HOW_TO_MAKE_TOKEN}")
    if not creds:
        raise ConfigError(f"token: no token given in {source}; {HOW_TO_MAKE_TOKEN}")
    return creds


def _duplicates(creds: list[Credential], problems: list[str]) -> None:
    names: dict[str, Credential] = {}
    digests: dict[bytes, Credential] = {}
    for c in creds:
        first = names.get(c.name)
        if first is not None:
            problems.append(f"line {c.line}: duplicate name {c.name!r} (also line {first.line})")
        names.setdefault(c.name, c)
        same = digests.get(c.digest)
        if same is not None:
            problems.append(
                f"line {c.line}: the same token as line {same.line} ({same.name!r}): "
                "one token, one credential"
            )
        digests.setdefault(c.digest, c)


# ---------------------------------------------------------------- the file's mode

_ACL_XATTR = "system.posix_acl_access"
_ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 0x04, 0x08, 0x10, 0x20


def shared_bits(mode: int, acl: bytes = b"") -> int:
    """The permission bits that let others than the owner read or change a file: the group's
    and other's. With a POSIX ACL (`acl`: its system.posix_acl_access value) the mode's
    group bits are the ACL's mask, so the owning group's and named groups' entries are read
    instead; a named user's entry is the owner's choice (systemd's LoadCredential grants the
    service's user one) and is not counted."""
    group = mode & 0o070
    if len(acl) >= 4 and (len(acl) - 4) % 8 == 0:
        group = 0
        for off in range(4, len(acl), 8):
            tag, perm, _ = struct.unpack_from("<HHI", acl, off)
            if tag in (_ACL_GROUP_OBJ, _ACL_GROUP):
                group |= (perm & 0o7) << 3
    return group | (mode & 0o007)


def exposure(path: Path) -> str | None:
    """Why others than its owner may read or change the token file, or None."""
    mode = stat.S_IMODE(path.stat().st_mode)
    try:
        acl = os.getxattr(path, _ACL_XATTR)
    except OSError:  # none, or a file system without extended attributes
        acl = b""
    wide = shared_bits(mode, acl)
    if not wide:
        return None
    who = " and ".join(w for w, bits in (("its group", 0o070), ("others", 0o007)) if wide & bits)
    return (
        f"{path} has mode {mode:04o}: {who} may read or change it; run: chmod 600 {path} "
        "(a token file is its owner's only)"
    )


def load_credentials(
    token_file: Path | None, env: Mapping[str, str] | None = None
) -> list[Credential]:
    """The credentials of --token-file (which wins), else of LANE_COORDINATOR_TOKEN. A file
    others may read or change is refused."""
    environ = os.environ if env is None else env
    if token_file is None:
        return parse_credentials(environ.get(TOKEN_ENV, ""), source=TOKEN_ENV, env=True)
    try:
        text = token_file.read_text(encoding="utf-8")
        wide = exposure(token_file)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(
            f"token: cannot read --token-file {token_file}: {why}; {HOW_TO_MAKE_TOKEN}"
        ) from exc
    if wide is not None:
        raise ConfigError(f"token: {wide}")
    return parse_credentials(text, source=str(token_file))
