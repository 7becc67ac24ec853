"""PostgreSQL's server binaries, found and run the one way both local clusters do it: the
kept one of `make run-ha` and `make drill-ha` (scripts/local_postgres.py, which imports this
as `pg_bin`) and the tests' throwaway one (tests/harness/postgres.py, as `scripts.pg_bin`).

- `find_bin_dir(error)`: the dir holding initdb, pg_ctl and postgres: initdb's on PATH
  (symlinks resolved, as /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb), else the
  highest /usr/lib/postgresql/N/bin (scripts/ensure-postgres.sh looks the same way).
- `run_as(error)`: initdb and the server refuse to run as root: as root every server-side
  command runs as the `postgres` OS user (`runuser -u postgres --`).
- `clean_env()`: the tools' environment; `psql_path(bin_dir, error)`: the psql to use.
- `HOST`: both clusters listen on loopback only; `free_port()`: a port free there now.

`error` is the caller's exception class, raised with a message that says what to do.
Standard library only.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

SUPERUSER = "postgres"  # the database superuser, and the OS user the server runs as when root
HOST = "127.0.0.1"
SERVER_TOOLS = ("initdb", "pg_ctl", "postgres")
ENSURE_HINT = (
    "run `sh scripts/ensure-postgres.sh` (as root it installs Debian's postgresql), "
    "or put initdb, pg_ctl and postgres on PATH"
)

Error = Callable[[str], Exception]


def _version_key(bin_dir: Path) -> tuple[int, ...]:
    """/usr/lib/postgresql/15/bin -> (15,); a name that is no version sorts first."""
    parts = bin_dir.parent.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (-1,)


def find_bin_dir(error: Error) -> Path:
    """The dir holding initdb, pg_ctl and postgres (see the module docstring)."""
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates += [Path(os.path.realpath(on_path)).parent, Path(on_path).parent]
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for d in candidates:
        if all(os.access(d / tool, os.X_OK) for tool in SERVER_TOOLS):
            return d
    raise error(f"no PostgreSQL server binaries ({', '.join(SERVER_TOOLS)}): " + ENSURE_HINT)


def run_as(error: Error) -> tuple[list[str], pwd.struct_passwd | None]:
    """The prefix of every server-side command and the OS user it runs as: as root
    `runuser -u postgres --` and that user, otherwise nothing (the current user)."""
    if os.geteuid() != 0:
        return [], None
    try:
        owner = pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise error(
            "initdb refuses to run as root and there is no `postgres` OS user to run it as: "
            + ENSURE_HINT
        ) from None
    return [shutil.which("runuser") or "/usr/sbin/runuser", "-u", SUPERUSER, "--"], owner


def clean_env() -> dict[str, str]:
    """The environment for PostgreSQL's tools: no PG* variables (PGDATA, PGPORT, PGHOST...
    would redirect them), the C locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def psql_path(bin_dir: Path, error: Error) -> str:
    """bin_dir's psql, else the one on PATH."""
    exe = bin_dir / "psql"
    found = str(exe) if os.access(exe, os.X_OK) else shutil.which("psql")
    if found is None:
        raise error(f"no psql in {bin_dir} nor on PATH: " + ENSURE_HINT)
    return found


def free_port() -> int:
    """A loopback port free right now (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port
