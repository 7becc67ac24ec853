"""A local PostgreSQL cluster kept in one folder between runs (`make run-ha`: var/ha/pg).

The same approach as the tests' throwaway cluster (tests/harness/postgres.py), for a cluster
that is kept: initdb once, then `pg_ctl start`/`stop` on each run. No Docker, no Debian
service cluster; `scripts/ensure-postgres.sh` installs Debian's postgresql when initdb is
missing.

- The server binaries: initdb, pg_ctl and postgres on PATH (symlinks resolved), else the
  highest /usr/lib/postgresql/N/bin (scripts/pg_bin.py, shared with the tests' cluster).
- initdb and the server refuse to run as root: as root every server-side command runs as the
  `postgres` OS user (`runuser -u postgres --`), the cluster folder is chowned to it, and
  every folder above it must let that user through (`o+x`): folders below the current
  directory (the repository's var/ and var/ha/) get it, any other one is reported.
- Loopback TCP only (`listen_addresses = '127.0.0.1'`, no unix socket), password
  authentication (scram-sha-256) for everyone, even on loopback: the machine may be shared.
  The superuser `postgres` and the application role own random passwords, written once into
  a pgpass file (0600) that libpq reads through PGPASSFILE; no password is ever on a command
  line or in a URL.
- The application role (`lane_coordinator`, not a superuser) owns the database
  `lane_coordinator`, so it may run the migrations.
- The port is chosen free at the first run and kept; taken by something else at a later run,
  another free one is chosen. A server left running by an earlier run is reused.

Standard library only (it runs before anything else is started).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import stat
import subprocess
from pathlib import Path

from pg_bin import (
    HOST,
    SERVER_TOOLS,
    SUPERUSER,
    clean_env,
    find_bin_dir,
    free_port,
    psql_path,
    run_as,
)

START_TIMEOUT = 60  # seconds, pg_ctl -t
SETTINGS_FILE = "lane-ha.conf"


class LocalPostgresError(RuntimeError):
    """The cluster cannot be set up or started; the message says why and what to do."""


def port_is_free(port: int) -> bool:
    """Whether nothing listens on the port. SO_REUSEADDR as PostgreSQL sets it: the closed
    connections of the previous run (TIME_WAIT) do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):  # a zombie does not run
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0] not in ("Z", "X")
    return True


class LocalPostgres:
    """The cluster in `root` (data in root/data, log in root/postgres.log); passwords in
    `pgpass`. `start()` returns the application's DSN; `stop()` is a fast shutdown."""

    def __init__(
        self,
        root: Path,
        pgpass: Path,
        *,
        role: str = "lane_coordinator",
        database: str = "lane_coordinator",
    ) -> None:
        self.root = root.absolute()
        self.pgpass = pgpass.absolute()
        self.role = role
        self.database = database
        self.data_dir = self.root / "data"
        self.log_file = self.root / "postgres.log"
        self.port = 0
        self.bin_dir = find_bin_dir(LocalPostgresError)
        self._run_as, self._owner = run_as(LocalPostgresError)

    # ------------------------------------------------------------------ URLs and clients

    @property
    def dsn(self) -> str:
        """The application's store URL: no password (libpq reads it from PGPASSFILE)."""
        return f"postgresql://{self.role}@{HOST}:{self.port}/{self.database}"

    def client_env(self) -> dict[str, str]:
        """The environment for libpq clients (psql, `lane-coordinator`): PGPASSFILE set."""
        env = clean_env()
        env["PGPASSFILE"] = str(self.pgpass)
        return env

    # ------------------------------------------------------------------ lifecycle

    def running_pid(self) -> int | None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def start(self) -> str:
        """initdb on the first run, start the server (or reuse one left running), make the
        role and the database when missing; returns the DSN."""
        self._prepare_root()
        passwords = self._passwords()
        fresh = not (self.data_dir / "PG_VERSION").exists()
        if fresh:
            self._initdb(passwords[SUPERUSER])
        pid = self.running_pid()
        if pid is not None:  # left running by an earlier run: its port is in postmaster.pid
            self.port = int((self.data_dir / "postmaster.pid").read_text().split("\n")[3])
        else:
            self.port = self._choose_port()
            self._write_settings()
            self._server_cmd(
                "pg_ctl",
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                str(START_TIMEOUT),
                "-s",
            )
        self._ensure_role_and_database(passwords[self.role])
        return self.dsn

    def stop(self) -> None:
        """`pg_ctl stop -m fast` (open transactions roll back, a checkpoint, data kept)."""
        if self.running_pid() is None:
            return
        self._server_cmd(
            "pg_ctl",
            "stop",
            "-D",
            str(self.data_dir),
            "-m",
            "fast",
            "-w",
            "-t",
            str(START_TIMEOUT),
            "-s",
        )

    # ------------------------------------------------------------------ steps

    def _prepare_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self._owner is None:
            return
        os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
        here = Path.cwd().absolute()
        for folder in self.root.parents:
            mode = folder.stat().st_mode
            if mode & stat.S_IXOTH:
                continue
            if folder.is_relative_to(here) and folder != here:
                folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)  # traverse only, no listing
                continue
            raise LocalPostgresError(
                f"the `postgres` OS user cannot reach {self.root}: {folder} is not "
                f"traversable (chmod o+x {folder}, or choose another folder)"
            )

    def _passwords(self) -> dict[str, str]:
        """The superuser's and the role's passwords from the pgpass file (written at the first
        run, 0600; lines host:port:database:user:password)."""
        found: dict[str, str] = {}
        if self.pgpass.exists():
            for line in self.pgpass.read_text().splitlines():
                parts = line.split(":")
                if len(parts) == 5 and parts[0] == HOST:
                    found.setdefault(parts[3], parts[4])
        if SUPERUSER in found and self.role in found:
            self.pgpass.chmod(0o600)
            return found
        if (self.data_dir / "PG_VERSION").exists():
            raise LocalPostgresError(
                f"{self.pgpass} is missing or incomplete, and the cluster in {self.data_dir} "
                f"needs its passwords: remove {self.root} to start over with a new cluster"
            )
        found = {SUPERUSER: secrets.token_hex(24), self.role: secrets.token_hex(24)}
        self.pgpass.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.pgpass, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"# the local cluster in {self.root} (make run-ha); libpq: PGPASSFILE\n")
            out.write(f"{HOST}:*:*:{SUPERUSER}:{found[SUPERUSER]}\n")
            out.write(f"{HOST}:*:*:{self.role}:{found[self.role]}\n")
        self.pgpass.chmod(0o600)
        return found

    def _initdb(self, superuser_password: str) -> None:
        if self.data_dir.exists():  # a half-made cluster from an interrupted first run
            shutil.rmtree(self.data_dir)
        pwfile = self.root / "initdb-password"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(superuser_password + "\n")
        if self._owner is not None:
            os.chown(pwfile, self._owner.pw_uid, self._owner.pw_gid)
        try:
            self._server_cmd(
                "initdb",
                "--pgdata",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=peer",
                "--encoding=UTF8",
                "--locale=C",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# lane-coordinator: make run-ha (scripts/local_postgres.py)\n")
            conf.write(f"include '{SETTINGS_FILE}'\n")

    def _choose_port(self) -> int:
        """The port of the earlier runs when it is free, else a new free one."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (self.data_dir / SETTINGS_FILE).read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "port" and port_is_free(int(value)):
                    return int(value)
        return free_port()

    def _write_settings(self) -> None:
        settings = {
            "port": str(self.port),
            "listen_addresses": f"'{HOST}'",
            "unix_socket_directories": "''",  # TCP on loopback only
            "password_encryption": "'scram-sha-256'",
            "max_connections": "100",
            "synchronous_commit": "on",  # the coordinator relies on it (and checks it)
        }
        path = self.data_dir / SETTINGS_FILE
        path.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        if self._owner is not None:
            os.chown(path, self._owner.pw_uid, self._owner.pw_gid)

    def _ensure_role_and_database(self, role_password: str) -> None:
        exists = self.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{self.role}'")
        if not exists.strip():
            # the password on psql's stdin: never on a command line
            self.psql(f"CREATE ROLE {self.role} LOGIN PASSWORD '{role_password}'")
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'")
        if not exists.strip():
            self.psql(f"CREATE DATABASE {self.database} OWNER {self.role}")

    # ------------------------------------------------------------------ commands

    def psql(self, sql: str, database: str = "postgres") -> str:
        """`sql` as the superuser over TCP (the statement on stdin); its unaligned output."""
        exe = psql_path(self.bin_dir, LocalPostgresError)
        cmd = [exe, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-w"]
        cmd += ["-h", HOST, "-p", str(self.port), "-U", SUPERUSER, "-d", database, "-f", "-"]
        return self._run(cmd, self.client_env(), sql).stdout

    def _server_cmd(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """A server-side tool from bin_dir, as the `postgres` OS user when we are root."""
        return self._run([*self._run_as, str(self.bin_dir / tool), *args], clean_env())

    def _run(
        self, cmd: list[str], env: dict[str, str], stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                cmd,
                cwd=self.root,
                env=env,
                input=stdin,
                stdin=subprocess.DEVNULL if stdin is None else None,
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT + 30,
                check=False,
                start_new_session=True,  # Ctrl-C reaches our handler, not a half-done initdb
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalPostgresError(f"{Path(cmd[0]).name}: timed out") from exc
        if done.returncode != 0:
            tool = next(
                (Path(c).name for c in cmd if Path(c).name in (*SERVER_TOOLS, "psql")), cmd[0]
            )
            raise LocalPostgresError(
                f"{tool} exited {done.returncode}:\n{done.stdout}{done.stderr}"
                f"--- {self.log_file} (tail) ---\n{self.log_tail()}"
            )
        return done

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
