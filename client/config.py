"""Client settings (docs/protocol.md#client-config): explicit arguments > environment > files, and
`connect()`.

Files, in the config dir (`$LANE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/lane`, else
`~/.config/lane`):
- `client.env` — non-secret `KEY=VALUE` settings written by `lane setup`, mode 0600. A looser
  mode is warned about, and a `LANE_TOKEN` line in such a file is ignored.
- `token` — the bearer token when no OS keyring works (headless Linux), mode 0600. A looser
  mode is refused (the token is not read; the message says `chmod 600`).
The token is looked up: argument > `LANE_TOKEN` > OS keyring (`keyring`, service
`lane-coordinator`, user = the coordinator URL) > `token` file > `client.env`. Every keyring
error is caught: a machine without a working keyring simply falls through to the file.
"""

from __future__ import annotations

import math
import os
import re
import socket
import stat
import sys
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from client.api import DEFAULT_TIMEOUT_SECONDS, LaneClient
from client.errors import ConfigError, PreProviderError
from client.local import DEFAULT_LOCAL_CAPACITY, LocalQueue
from coordinator.protocol.names import MACHINE_RE

if TYPE_CHECKING:
    import aiohttp

    from client.api import LaneBackend

ENV_URL = "LANE_COORDINATOR_URL"
ENV_TOKEN = "LANE_TOKEN"
ENV_MACHINE = "LANE_MACHINE_ID"
ENV_ACCOUNT = "LANE_ACCOUNT"
ENV_REQUIRED = "LANE_REQUIRED"
ENV_CLAIM = "LANE_CLAIM"
ENV_COOLDOWN = "LANE_HUMAN_CHECK_COOLDOWN_SECONDS"
ENV_STATE_DIR = "LANE_STATE_DIR"
ENV_LOCAL_CAPACITY = "LANE_LOCAL_CAPACITY"
ENV_TIMEOUT = "LANE_TIMEOUT_SECONDS"
ENV_SELF_TEST_ACCOUNT = "LANE_SELF_TEST_ACCOUNT"
ENV_CONFIG_DIR = "LANE_CONFIG_DIR"
# a reader credential for the control room (`lane dashboard` prefers it to the driver's token)
ENV_READ_TOKEN = "LANE_READ_TOKEN"

KEYRING_SERVICE = "lane-coordinator"
DEFAULT_COOLDOWN_SECONDS = 900.0
MIN_COOLDOWN_SECONDS = 30.0
MAX_COOLDOWN_SECONDS = 7200.0
DEFAULT_SELF_TEST_ACCOUNT = "self-test"
CLIENT_ENV_NAME = "client.env"
TOKEN_FILE_NAME = "token"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Settings:
    url: str | None
    token: str | None = field(repr=False)
    token_source: str  # where the token came from (never the token itself)
    machine_id: str | None
    account: str | None
    required: bool
    claim_id: str | None
    human_check_cooldown_seconds: float
    state_dir: Path
    local_capacity: int
    timeout: float
    self_test_account: str
    config_dir: Path
    warnings: tuple[str, ...] = ()
    token_problem: str | None = None  # why a token file was not used
    read_token: str | None = field(default=None, repr=False)  # $LANE_READ_TOKEN


def config_dir(environ: MutableMapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_CONFIG_DIR):
        return Path(env[ENV_CONFIG_DIR]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser() / "lane"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".config" / "lane"


def default_state_dir() -> Path:
    return Path(platformdirs.user_state_dir("lane", appauthor=False))


def default_machine_id() -> str:
    """The host name reduced to the protocol's machineId alphabet (local queue only)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname() or "localhost")[:64]
    return name or "localhost"


def mode_problem(path: Path) -> str | None:
    """Why `path` is readable or writable by others, or None when it is 0600 (or stricter)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    if mode & 0o077:
        return f"{path} has mode {mode:04o} (readable by others); run: chmod 600 {path}"
    return None


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=VALUE` lines (optional `export`, optional quotes, `#` comments)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return out
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        if m is None:
            continue
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[m.group(1)] = value
    return out


def write_private_file(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 (directory 0700), replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def keyring_get(url: str) -> str | None:
    """The token stored for `url` in the OS keyring; None on any keyring problem."""
    try:
        import keyring

        value = keyring.get_password(KEYRING_SERVICE, url)
    except Exception:  # no backend, locked, D-Bus missing, ... — never crash
        return None
    return value if isinstance(value, str) and value else None


def keyring_set(url: str, token: str) -> str | None:
    """Store the token in the OS keyring; the backend's name, or None when none works."""
    try:
        import keyring

        keyring.set_password(KEYRING_SERVICE, url, token)
        if keyring.get_password(KEYRING_SERVICE, url) != token:
            return None
        backend = keyring.get_keyring()
        return f"{type(backend).__module__}.{type(backend).__name__}"
    except Exception:
        return None


def _pick(
    arg: str | None, env: MutableMapping[str, str], files: dict[str, str], key: str
) -> str | None:
    """The one rule for every setting: argument > environment > client.env, where an empty
    value counts as unset (`LANE_ACCOUNT=` and `LANE_REQUIRED=` alike fall through)."""
    if arg is not None and arg != "":
        return arg
    if env.get(key):
        return env[key]
    return files.get(key) or None


def parse_bool(value: str | None) -> bool | None:
    """None when unset; unknown spellings count as true (fail closed)."""
    if value is None:
        return None
    low = value.strip().lower()
    if low in _FALSE:
        return False
    return True if low in _TRUE else None


def clamp_cooldown(value: float) -> float:
    return min(MAX_COOLDOWN_SECONDS, max(MIN_COOLDOWN_SECONDS, value))


def load_settings(
    *,
    url: str | None = None,
    token: str | None = None,
    machine_id: str | None = None,
    account: str | None = None,
    required: bool | None = None,
    claim_id: str | None = None,
    state_dir: Path | str | None = None,
    timeout: float | None = None,
    environ: MutableMapping[str, str] | None = None,
    mint_claim: bool = True,
    use_keyring: bool = True,
) -> Settings:
    """Resolve every setting. With `mint_claim`, an unset LANE_CLAIM is minted (uuid4) and
    exported into the environment so child processes (e.g. `lane` calls) inherit it."""
    env = os.environ if environ is None else environ
    warnings: list[str] = []
    cdir = config_dir(env)
    env_path = cdir / CLIENT_ENV_NAME
    files = read_env_file(env_path)
    file_loose = mode_problem(env_path) if files else None
    if file_loose is not None:
        warnings.append(f"lane: warning: {file_loose}")
        if ENV_TOKEN in files:
            warnings.append(f"lane: warning: ignoring {ENV_TOKEN} in {env_path} (not private)")
            files.pop(ENV_TOKEN)

    url_v = _pick(url, env, files, ENV_URL)
    url_v = url_v.strip().rstrip("/") if url_v else None

    raw_required = _pick(None, env, files, ENV_REQUIRED)  # `LANE_REQUIRED=` is unset too
    req = required
    if req is None:
        parsed = parse_bool(raw_required)
        if raw_required is not None and parsed is None:
            warnings.append(
                f"lane: warning: {ENV_REQUIRED}={raw_required!r} is not 0/1; treated as 1 "
                "(fail closed)"
            )
            parsed = True
        req = bool(parsed)

    claim = claim_id or env.get(ENV_CLAIM) or None
    if claim is None and mint_claim:
        claim = str(uuid.uuid4())
        env[ENV_CLAIM] = claim

    cooldown = DEFAULT_COOLDOWN_SECONDS
    raw_cd = _pick(None, env, files, ENV_COOLDOWN)
    if raw_cd is not None:
        try:
            value = float(raw_cd)
            if math.isnan(value):
                raise ValueError
            cooldown = clamp_cooldown(value)
        except ValueError:
            warnings.append(f"lane: warning: {ENV_COOLDOWN}={raw_cd!r} is not a number; using 900")

    capacity = DEFAULT_LOCAL_CAPACITY
    raw_cap = _pick(None, env, files, ENV_LOCAL_CAPACITY)
    if raw_cap is not None:
        try:
            capacity = int(raw_cap)
            if capacity < 1:
                raise ValueError
        except ValueError:
            warnings.append(
                f"lane: warning: {ENV_LOCAL_CAPACITY}={raw_cap!r} is not a positive integer; "
                f"using {DEFAULT_LOCAL_CAPACITY}"
            )
            capacity = DEFAULT_LOCAL_CAPACITY

    tmo = DEFAULT_TIMEOUT_SECONDS
    if timeout is not None:
        tmo = float(timeout)
    else:
        raw_t = _pick(None, env, files, ENV_TIMEOUT)
        if raw_t is not None:
            try:
                tmo = float(raw_t)
                if not tmo > 0:
                    raise ValueError
            except ValueError:
                warnings.append(f"lane: warning: {ENV_TIMEOUT}={raw_t!r} is invalid; using 10")
                tmo = DEFAULT_TIMEOUT_SECONDS

    sdir = _pick(str(state_dir) if state_dir is not None else None, env, files, ENV_STATE_DIR)
    state_path = Path(sdir).expanduser() if sdir else default_state_dir()

    tok, source, problem = _resolve_token(token, env, files, url_v, cdir, use_keyring)

    return Settings(
        url=url_v,
        token=tok,
        token_source=source,
        machine_id=_pick(machine_id, env, files, ENV_MACHINE),
        account=_pick(account, env, files, ENV_ACCOUNT),
        required=req,
        claim_id=claim,
        human_check_cooldown_seconds=cooldown,
        state_dir=state_path,
        local_capacity=capacity,
        timeout=tmo,
        self_test_account=_pick(None, env, files, ENV_SELF_TEST_ACCOUNT)
        or DEFAULT_SELF_TEST_ACCOUNT,
        config_dir=cdir,
        warnings=tuple(warnings),
        token_problem=problem,
        read_token=env.get(ENV_READ_TOKEN) or None,
    )


def _resolve_token(
    token: str | None,
    env: MutableMapping[str, str],
    files: dict[str, str],
    url: str | None,
    cdir: Path,
    use_keyring: bool,
) -> tuple[str | None, str, str | None]:
    if token:
        return token, "argument", None
    if env.get(ENV_TOKEN):
        return env[ENV_TOKEN], f"${ENV_TOKEN}", None
    if url and use_keyring:
        found = keyring_get(url)
        if found:
            return found, f"the OS keyring (service {KEYRING_SERVICE!r}, user {url!r})", None
    problem: str | None = None
    tpath = cdir / TOKEN_FILE_NAME
    if tpath.exists():
        problem = mode_problem(tpath)
        if problem is None:
            try:
                value = tpath.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                value = ""
                problem = f"{tpath} cannot be read"
            if value:
                return value.splitlines()[0].strip(), str(tpath), None
        else:
            problem = f"token file refused: {problem}"
    if files.get(ENV_TOKEN):
        return files[ENV_TOKEN], str(cdir / CLIENT_ENV_NAME), problem
    return None, "", problem


_announced: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _announced:
        _announced.add(message)
        print(message, file=sys.stderr)


def connect(
    settings: Settings | None = None, *, session: aiohttp.ClientSession | None = None
) -> LaneBackend:
    """The backend these settings call for: the shared coordinator when a URL is set; the
    local queue when it is unset and not required; never the local queue when required."""
    s = settings if settings is not None else load_settings()
    for w in s.warnings:
        _say_once(w)
    if s.url:
        missing = []
        if not s.token:
            hint = f" — {s.token_problem}" if s.token_problem else ""
            missing.append(
                f"{ENV_TOKEN} (not in the environment, the OS keyring or "
                f"{s.config_dir / TOKEN_FILE_NAME}; run `lane setup URL MACHINE_ID`){hint}"
            )
        if not s.machine_id:
            missing.append(ENV_MACHINE)
        elif not MACHINE_RE.match(s.machine_id):
            missing.append(f"{ENV_MACHINE} (must be 1-64 of [A-Za-z0-9._-])")
        if missing:
            what = "missing client configuration: " + "; ".join(missing)
            if s.required:
                raise PreProviderError(what)
            raise ConfigError(message=what)
        assert s.token is not None and s.machine_id is not None
        return LaneClient(
            s.url,
            s.token,
            s.machine_id,
            s.claim_id,
            timeout=s.timeout,
            required=s.required,
            session=session,
        )
    if s.required:
        raise PreProviderError(
            f"{ENV_REQUIRED}=1 but {ENV_URL} is unset: the shared coordinator is required and "
            "the local queue is never used as a fallback"
        )
    machine = s.machine_id or default_machine_id()
    queue = LocalQueue(s.state_dir, machine, s.claim_id, capacity=s.local_capacity)
    _say_once(
        f"lane: {ENV_URL} is unset — using the local single-computer queue in {s.state_dir} "
        "(not shared with other computers)"
    )
    return queue
