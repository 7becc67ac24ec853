"""A throwaway PostgreSQL cluster for the tests: no Docker, no Debian service cluster.

`PostgresCluster.start_new()` finds the server binaries (`find_bin_dir`: initdb, pg_ctl and
postgres on PATH, else the highest /usr/lib/postgresql/N/bin, the search scripts/pg_bin.py
does for `make run-ha` too; `scripts/ensure-postgres.sh` installs Debian's when missing),
runs initdb in a fresh temp dir, starts its own postmaster with `pg_ctl start -w` on a free
loopback port and creates the database `lane_test`: `cluster.dsn` is
`postgresql://postgres@127.0.0.1:PORT/lane_test`.

The cluster: superuser `postgres` without a password (trust auth, loopback only:
listen_addresses='127.0.0.1', the unix socket inside the temp dir), `fsync=off` for test speed
only (a kill -9 of the server loses nothing with it; only an OS crash would),
`synchronous_commit=on` as the product relies on, `max_connections=100`.

initdb and the server refuse to run as root: as root every server-side command runs as the
`postgres` OS user (`runuser -u postgres --`, the temp dir is chowned to it); otherwise as the
current user.

Faults: `stop(mode)` (`pg_ctl stop -m smart|fast|immediate`), `start()`, `restart(mode)`
(stop, then start on the same port), `kill9()` (SIGKILL to the postmaster; its children
exit on their own; the next `start()` runs crash recovery). `fresh_database(name)` drops
and creates a database and returns its DSN (per-test isolation). `close()` stops the
server and removes the temp dir; it also runs at interpreter exit and when the run is killed
(SIGTERM, SIGINT: tests.harness.cleanup).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from scripts import pg_bin
from scripts.pg_bin import HOST, SUPERUSER, clean_env, free_port, psql_path, run_as
from tests.harness import cleanup

StopMode = Literal["smart", "fast", "immediate"]

DEFAULT_DATABASE = "lane_test"
START_TIMEOUT = 60  # seconds, pg_ctl -t: generous, the machine is shared
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SOCKET_PATH_MAX = 107 - len("/.s.PGSQL.65535")  # sun_path, less the socket's file name


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries, or no way to run them (root without a `postgres` user)."""


class PostgresError(RuntimeError):
    """A PostgreSQL command failed; the message carries its output and the server log's tail."""


def find_bin_dir() -> Path:
    """The dir holding initdb, pg_ctl and postgres (scripts/pg_bin.py): initdb's on PATH
    (symlinks resolved), else the highest /usr/lib/postgresql/N/bin."""
    return pg_bin.find_bin_dir(PostgresUnavailable)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel (a zombie then counts as running)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return fields[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc; empty where there is none)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry.name))
    return found


def _wait_until_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait for every pid to be gone; returns those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _temp_parent() -> Path:
    """Where the cluster's temp dir goes: the usual temp dir, unless its path is too long
    for the unix socket or (as root) the `postgres` user cannot traverse it; then /tmp."""
    base = Path(tempfile.gettempdir()).resolve()
    too_long = len(str(base)) + len("/lane-pg-xxxxxxxx/socket") > _SOCKET_PATH_MAX
    if os.geteuid() == 0:
        traversable = all(
            p.stat().st_mode & stat.S_IXOTH for p in (base, *base.parents) if p.exists()
        )
        if not traversable:
            return Path("/tmp")
    return Path("/tmp") if too_long else base


class PostgresCluster:
    """One throwaway cluster (see the module docstring). Build it with `start_new()`."""

    def __init__(self, bin_dir: Path | None = None, database: str = DEFAULT_DATABASE) -> None:
        """Prepare (not start) a cluster: finds the binaries and the OS user to run them as,
        and makes the temp dir. `start_new()` does this, initdb, start and the database."""
        _check_name(database)
        self.bin_dir = bin_dir if bin_dir is not None else find_bin_dir()
        self.database = database
        self.port = 0
        self.startup_seconds = 0.0  # initdb + start + create database, as measured
        self.server_version = 0  # server_version_num (150018 for 15.18), read once started
        self._run_as, owner = run_as(PostgresUnavailable)
        self.root = Path(tempfile.mkdtemp(prefix="lane-pg-", dir=_temp_parent()))
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self._owner = owner
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "socket"
        self.log_file = self.root / "postgres.log"
        self._closed = False
        self._cleanup = cleanup.register(self.close, f"PostgreSQL cluster in {self.root}")

    # ------------------------------------------------------------------ building it

    @classmethod
    def start_new(
        cls, bin_dir: Path | None = None, database: str = DEFAULT_DATABASE
    ) -> PostgresCluster:
        """initdb, start on a free port, create `database`: ready for `dsn`."""
        began = time.monotonic()
        cluster = cls(bin_dir, database)
        try:
            cluster._initdb()
            cluster._start_on_free_port()
            cluster._create_database(database)
        except BaseException:
            cluster.close()
            raise
        cluster.startup_seconds = time.monotonic() - began
        return cluster

    def _initdb(self) -> None:
        self.socket_dir.mkdir()
        if self._owner is not None:
            os.chown(self.socket_dir, self._owner.pw_uid, self._owner.pw_gid)
        self._server_cmd(
            "initdb",
            "--pgdata",
            str(self.data_dir),
            "--username",
            SUPERUSER,
            "--auth=trust",  # pg_hba: local, 127.0.0.1/32 and ::1/128, replication too
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",  # test speed: initdb's files are not fsynced
        )
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# lane-coordinator test cluster (tests/harness/postgres.py)\n")
            conf.write("include 'lane-test.conf'\n")

    def _write_settings(self) -> None:
        settings = {
            "port": str(self.port),
            "listen_addresses": f"'{HOST}'",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": "100",
            "shared_buffers": "32MB",
            "fsync": "off",  # test speed only: never in production
            "synchronous_commit": "on",  # the product relies on it
        }
        path = self.data_dir / "lane-test.conf"
        path.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        if self._owner is not None:
            os.chown(path, self._owner.pw_uid, self._owner.pw_gid)

    def _start_on_free_port(self, tries: int = 3) -> None:
        """The first start: a free port, another one when it was taken meanwhile."""
        for attempt in range(tries):
            self.port = free_port()
            self._write_settings()
            try:
                self.start()
                return
            except PostgresError:
                if attempt + 1 == tries or "already in use" not in self.log_tail():
                    raise

    def _create_database(self, name: str) -> None:
        if not self.server_version:
            self.server_version = int(self.psql("SHOW server_version_num", database="postgres"))
        # PostgreSQL 15+: FILE_COPY copies template1's files (about 3x faster here than the
        # default WAL_LOG, which writes them all to the WAL)
        strategy = " STRATEGY FILE_COPY" if self.server_version >= 150000 else ""
        self.psql(f"CREATE DATABASE {name}{strategy}", database="postgres")

    # ------------------------------------------------------------------ commands

    def _server_cmd(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """A server-side tool from bin_dir, as the `postgres` OS user when we are root."""
        cmd = [*self._run_as, str(self.bin_dir / tool), *args]
        return self._run(cmd)

    def _run(
        self, cmd: list[str], timeout: float = START_TIMEOUT + 30
    ) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                cmd,
                cwd=self.root,
                env=clean_env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise PostgresError(f"{' '.join(cmd)} timed out after {timeout}s") from e
        if done.returncode != 0:
            raise PostgresError(
                f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
                f"--- server log (tail) ---\n{self.log_tail()}"
            )
        return done

    def psql(self, sql: str, database: str | None = None) -> str:
        """Run `sql` with psql (superuser, over TCP) and return its unaligned output."""
        exe = psql_path(self.bin_dir, PostgresUnavailable)
        cmd = [exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        cmd += ["-h", HOST, "-p", str(self.port), "-U", SUPERUSER]
        cmd += ["-d", database or self.database, "-c", sql]
        return self._run(cmd, timeout=60).stdout

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server log ('' before there is one)."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ the server

    @property
    def dsn(self) -> str:
        """postgresql://postgres@127.0.0.1:PORT/lane_test"""
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{database}"

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (from postmaster.pid), None when none runs."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first)
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def running(self) -> bool:
        return self.postmaster_pid() is not None

    def start(self) -> None:
        """Start the server (`pg_ctl start -w`) on its port; nothing when it runs."""
        if self.running():
            return
        self._drop_stale_locks()
        self._server_cmd(
            "pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.log_file),
            "-w", "-t", str(START_TIMEOUT), "-s",
        )  # fmt: skip

    def stop(self, mode: StopMode = "fast") -> None:
        """`pg_ctl stop -m MODE -w`: fast rolls back open transactions and checkpoints;
        immediate quits at once (the next start runs crash recovery). Nothing when it is
        not running."""
        if not self.running():
            return
        self._server_cmd(
            "pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode,
            "-w", "-t", str(START_TIMEOUT), "-s",
        )  # fmt: skip

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop (`mode`) when running, then start again on the same port."""
        self.stop(mode)
        self.start()

    def kill9(self, timeout: float = 30.0) -> int:
        """SIGKILL the postmaster, as a crash would; returns its pid. Waits until its children
        have exited on their own (they watch for the postmaster's death; any still there at
        `timeout` get SIGKILL too), so that `start()` can follow at once."""
        pid = self.postmaster_pid()
        if pid is None:
            raise PostgresError("kill9: the server is not running")
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        left = _wait_until_gone([pid, *children], timeout)
        for straggler in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(straggler, signal.SIGKILL)
        if _wait_until_gone(left, 10.0):
            raise PostgresError(f"kill9: processes {left} of the killed server still run")
        return pid

    def _drop_stale_locks(self) -> None:
        """A killed postmaster that nobody reaps stays a zombie (PID 1 of a container often
        reaps nothing), and PostgreSQL's lock-file check (kill(pid, 0)) takes a zombie for a
        live server. Remove the lock files (postmaster.pid and the socket's .lock) whose pid
        is such a zombie; PostgreSQL itself replaces those whose pid is gone."""
        locks = (self.data_dir / "postmaster.pid", self.socket_dir / f".s.PGSQL.{self.port}.lock")
        for lock in locks:
            with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
                pid = int(lock.read_text().split("\n", 1)[0])
                if _alive(pid):
                    continue
                with contextlib.suppress(PermissionError, ProcessLookupError):
                    os.kill(pid, 0)
                    lock.unlink()  # the pid still exists, and does not run: a zombie

    # ------------------------------------------------------------------ databases

    def fresh_database(self, name: str) -> str:
        """Drop `name` when it exists (closing its connections), create it empty, return its
        DSN. Names: lower-case letters, digits, underscores; at most 63."""
        _check_name(name)
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", database="postgres")
        self._create_database(name)
        return self.dsn_for(name)

    def drop_database(self, name: str) -> None:
        _check_name(name)
        self.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", database="postgres")

    # ------------------------------------------------------------------ the end

    def close(self) -> None:
        """Stop the server (immediate: nothing is kept) and remove the temp dir."""
        if self._closed:
            return
        self._closed = True
        cleanup.unregister(self._cleanup)
        try:
            if self.running():
                self.stop("immediate")
        except PostgresError:
            pid = self.postmaster_pid()
            if pid is not None:
                with contextlib.suppress(PostgresError):
                    self.kill9()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresCluster({self.dsn!r}, bin_dir={str(self.bin_dir)!r})"


def _check_name(name: str) -> None:
    if not _DB_NAME.fullmatch(name):
        raise ValueError(f"database name {name!r}: use [a-z_][a-z0-9_]*, at most 63 characters")
