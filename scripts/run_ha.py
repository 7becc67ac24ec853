"""`make run-ha`: lane-coordinator with high availability, on one machine, in one command.

1. A local PostgreSQL cluster in DIR/pg (default var/ha/pg), kept between runs
   (scripts/local_postgres.py: initdb once, its own port on 127.0.0.1, passwords in DIR/pgpass).
2. `lane-coordinator migrate --store URL`.
3. Two replicas: `lane-coordinator serve --store URL` on two loopback ports (default PORT+1 and
   PORT+2), the same token file DIR/credentials (0600: the hash of an admin credential whose
   token is DIR/token, docs/operator.md#credentials) and the same config as `make run`.
4. The failover proxy (scripts/ha_proxy.py) on PORT, in front of both.

It prints the replicas' ports, the proxy's URL and the token, then every process's log lines
prefixed with its name. Kill one replica (`kill -9 PID`, the PIDs are printed) and the proxy
routes around it within a second. Ctrl-C (or SIGTERM) stops everything in order: the proxy,
the replicas (gracefully), then PostgreSQL (fast shutdown; the data stays in DIR/pg). A second
Ctrl-C kills what is still running. Exit 0 after a clean stop, 1 when something failed to
start.

Standard library only; run it with the project's venv Python (it finds `lane-coordinator`
next to it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import secrets
import signal
import stat
import sys
from collections.abc import Awaitable, Sequence
from pathlib import Path

from local_postgres import LocalPostgres, LocalPostgresError

SCRIPTS = Path(__file__).resolve().parent
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0  # the coordinator's own grace is 10 s


def say(line: str) -> None:
    print(f"[run-ha] {line}", flush=True)


def coordinator_cmd() -> list[str]:
    """The venv's `lane-coordinator` (next to this Python), else the module."""
    exe = Path(sys.executable).with_name("lane-coordinator")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "coordinator.cli"]


def _retrieved(future: asyncio.Future[str]) -> None:
    if not future.cancelled():
        future.exception()


class Child:
    """A subprocess in its own session (Ctrl-C reaches only us: we stop it in order), its
    merged output printed line by line with a prefix."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, ready_marker: str) -> None:
        self.name = name
        self.proc = proc
        self.url: str | None = None
        self.ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(_retrieved)  # an early exit is reported, not warned about
        self._marker = ready_marker
        self.pump = asyncio.create_task(self._pump())

    @classmethod
    async def start(
        cls, name: str, args: Sequence[str], env: dict[str, str], ready_marker: str
    ) -> Child:
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        return cls(name, proc, ready_marker)

    async def _pump(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            print(f"[{self.name}] {line}", flush=True)
            if not self.ready.done() and self._marker in line:
                self.ready.set_result(line.split(self._marker, 1)[1].split()[0])
        if not self.ready.done():
            code = await self.proc.wait()
            self.ready.set_exception(
                RuntimeError(f"{self.name} exited ({code}) before it was ready")
            )

    async def wait_ready(self) -> str:
        """The URL from the ready line (`... listening on http://HOST:PORT`)."""
        try:
            self.url = await asyncio.wait_for(asyncio.shield(self.ready), START_TIMEOUT)
        except TimeoutError:
            raise RuntimeError(f"{self.name} not ready within {START_TIMEOUT:g} s") from None
        return self.url

    def running(self) -> bool:
        return self.proc.returncode is None

    async def stop(self, force: asyncio.Event) -> None:
        """SIGTERM, wait (SIGKILL after STOP_TIMEOUT or on `force`), drain the output."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            waiter = asyncio.ensure_future(self.proc.wait())
            forced = asyncio.ensure_future(force.wait())
            await asyncio.wait(
                {waiter, forced}, timeout=STOP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
            forced.cancel()
            if self.running():
                say(f"{self.name} did not stop in time: SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            await waiter
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.pump, 5)


class LogTail:
    """The lines appended to a file (PostgreSQL's log) from now on, printed with a prefix."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path = path
        self.prefix = prefix
        try:
            self.offset = path.stat().st_size
        except OSError:
            self.offset = 0
        self.partial = b""

    def print_new(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            print(f"[{self.prefix}] {line.decode(errors='replace')}", flush=True)

    async def follow(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self.print_new()


def prepare_dir(ha_dir: Path) -> str:
    """DIR (0700; traversable by the `postgres` user when we are root), its token (DIR/token,
    0600, made once) and the replicas' token file (DIR/credentials, 0600: only the token's
    hash, as the admin credential `ha-admin`); returns the token."""
    ha_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.geteuid() == 0:  # the server runs as `postgres` and must pass through DIR
        ha_dir.chmod(stat.S_IMODE(ha_dir.stat().st_mode) | stat.S_IXOTH)
    token_file = ha_dir / "token"
    if not token_file.exists() or not token_file.read_text().strip():
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    token_file.chmod(0o600)  # a token file left by an older run may be more open
    token = token_file.read_text().split()[0]
    digest = hashlib.sha256(token.encode()).hexdigest()
    creds = ha_dir / "credentials"
    fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"sha256:{digest} name=ha-admin role=admin\n")
    creds.chmod(0o600)
    return token


def banner(proxy_url: str, replicas: list[Child], dsn: str, ha_dir: Path, token: str) -> str:
    lines = [
        "lane-coordinator HA on loopback: two replicas on one PostgreSQL, a failover proxy",
        f"  proxy        : {proxy_url}   (point clients here; control room: "
        f"{proxy_url}/control-room)",
    ]
    for r in replicas:
        port = (r.url or "").rsplit(":", 1)[-1]
        lines.append(f"  {r.name:<12} : {r.url}   port {port}, pid {r.proc.pid}")
    lines += [
        f"  PostgreSQL   : {dsn}   (password in {ha_dir}/pgpass, data in {ha_dir}/pg)",
        f"  token        : {token}   (stored in {ha_dir}/token)",
        f"  try          : curl -s -X POST {proxy_url}/v1/lanes/status \\",
        f'                   -H "Authorization: Bearer $(cat {ha_dir}/token)" '
        "-H 'Content-Type: application/json' \\",
        """                   -d '{"protocolVersion":1,"lane":"seedance-direct:main-unlimited"}'""",
        f"  replicas     : curl -s {proxy_url}/_ha/replicas   (the proxy's view: ready or not)",
        f"  failover     : kill -9 {replicas[0].proc.pid}   (replica-1: requests go on through "
        "replica-2; the proxy marks it unready within about 1 s)",
        "  stop         : Ctrl-C (proxy, replicas, then PostgreSQL; the data is kept)",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> int:
    os.umask(0o077)
    ha_dir = Path(args.dir)
    token = prepare_dir(ha_dir)
    token_file = (ha_dir / "credentials").absolute()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    force = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            force.set()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal)

    try:
        pg = LocalPostgres(ha_dir / "pg", ha_dir / "pgpass")
    except LocalPostgresError as exc:
        say(f"failed: {exc}")
        return 1
    children: list[Child] = []
    pg_log = LogTail(pg.log_file, "postgres")
    tail: asyncio.Task[None] | None = None
    code = 0
    try:
        say(f"starting PostgreSQL in {pg.root} ({pg.bin_dir})")
        dsn = await asyncio.to_thread(pg.start)
        tail = asyncio.create_task(pg_log.follow())
        if stop.is_set():
            raise Interrupted
        say(f"PostgreSQL ready on 127.0.0.1:{pg.port}; migrating")
        env = pg.client_env()
        env.pop("LANE_COORDINATOR_TOKEN", None)
        env.pop("LANE_COORDINATOR_STORE", None)
        migrate = await asyncio.create_subprocess_exec(
            *coordinator_cmd(), "migrate", "--store", dsn, env=env, start_new_session=True
        )
        if await migrate.wait() != 0:
            say("lane-coordinator migrate failed (above)")
            return 1
        if stop.is_set():
            raise Interrupted
        ports = args.replica_ports or [0 if args.port == 0 else args.port + i for i in (1, 2)]
        for i, port in enumerate(ports, 1):
            serve = [
                *coordinator_cmd(),
                "serve",
                "--store",
                dsn,
                "--host",
                args.host,
                "--port",
                str(port),
                "--token-file",
                str(token_file),
            ]
            if args.config:
                serve += ["--config", str(args.config)]
            children.append(await Child.start(f"replica-{i}", serve, env, "listening on "))
        replicas = list(children)
        for r in replicas:
            await wait_or_stop(r.wait_ready(), stop)
        proxy_args = [
            sys.executable,
            str(SCRIPTS / "ha_proxy.py"),
            "--listen",
            f"{args.host}:{args.port}",
        ]
        for r in replicas:
            proxy_args += ["--replica", r.url or ""]
        proxy = await Child.start("proxy", proxy_args, env, "ha-proxy listening on ")
        children.append(proxy)
        proxy_url = await wait_or_stop(proxy.wait_ready(), stop)
        print(banner(proxy_url, replicas, dsn, ha_dir, token), flush=True)
        code = await supervise(proxy, replicas, stop)
    except (LocalPostgresError, RuntimeError, TimeoutError) as exc:
        if not stop.is_set():
            say(f"failed: {exc}")
            if "before it was ready" in str(exc):
                say("a port in use? choose others: make run-ha PORT=N HA_REPLICA_PORTS=P1,P2")
            code = 1
    except Interrupted:  # a signal while starting
        pass
    finally:
        say("stopping: proxy, replicas, then PostgreSQL")
        for child in reversed(children):  # the proxy first: no request lands on a stopping one
            if child.name == "proxy":
                await child.stop(force)
        await asyncio.gather(*(c.stop(force) for c in children if c.name != "proxy"))
        try:
            await asyncio.to_thread(pg.stop)
        except LocalPostgresError as exc:
            say(f"PostgreSQL did not stop cleanly: {exc}")
            code = code or 1
        if tail is not None:
            tail.cancel()
            pg_log.print_new()
        say(f"stopped (data kept in {pg.root})")
    return code


class Interrupted(Exception):
    """A stop signal came while starting."""


async def wait_or_stop(aw: Awaitable[str], stop: asyncio.Event) -> str:
    """The awaitable's result, unless a stop signal comes first (then Interrupted)."""
    task = asyncio.ensure_future(aw)
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task not in done:
        task.cancel()
        raise Interrupted
    return task.result()


async def supervise(proxy: Child, replicas: list[Child], stop: asyncio.Event) -> int:
    """Until a signal or the proxy's end; a replica's end is reported (the demo kills one)."""
    reported: set[str] = set()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
        if not proxy.running():
            say(f"the proxy exited ({proxy.proc.returncode}): stopping")
            return 1
        for r in replicas:
            if not r.running() and r.name not in reported:
                reported.add(r.name)
                alive = [o.name for o in replicas if o.running()]
                say(
                    f"{r.name} exited ({r.proc.returncode}); serving on: "
                    f"{', '.join(alive) or 'none'} (Ctrl-C and `make run-ha` to start it again)"
                )
    return 0


def _ports(value: str) -> list[int]:
    parts = [p for p in value.replace(",", " ").split() if p]
    if not parts:
        return []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError("expected two ports, e.g. 8788,8789")
    return [int(p) for p in parts]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_ha", description=__doc__.split("\n", 1)[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8787, help="the proxy's port (0: any free one)")
    p.add_argument(
        "--replica-ports",
        type=_ports,
        default=[],
        metavar="P1,P2",
        help="the replicas' ports (default PORT+1,PORT+2; 0,0 any free ones)",
    )
    p.add_argument("--config", type=Path, default=None, help="the coordinator config")
    p.add_argument("--dir", type=Path, default=Path("var/ha"), help="token, pgpass, pg/")
    return p


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
