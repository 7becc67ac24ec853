"""`lane-coordinator serve|check|backup|migrate|import|token`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import resource
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from coordinator import __version__
from coordinator import constants as C
from coordinator.cli_args import STORE_ENV
from coordinator.cli_args import build_parser as build_parser  # re-exported: tests, scripts
from coordinator.config import Config, load_config
from coordinator.credentials import Credential, Credentials, load_credentials
from coordinator.errors import ConfigError
from coordinator.logs import configure_logging
from coordinator.protocol.constants import ACTOR_POSTGRES, ACTOR_SQLITE
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import lane_from_file_name
from coordinator.store.files import copy_lane_file, data_dir_refused, make_private_dir
from coordinator.store.postgres_db import migrate, migrations
from coordinator.store.postgres_storage import PostgresStorage
from coordinator.store.sqlite import SqliteLaneStore
from coordinator.store.storage import SQLITE, postgres_url, sqlite_data_dir, store_label
from coordinator.token_cli import token_cmd

log = structlog.get_logger("coordinator.cli")

PRIVATE_UMASK = 0o077


def resolve_store(
    flag: str | None, config: Config, env: dict[str, str] | None = None
) -> str | None:
    """The store URL in force: --store, else $LANE_COORDINATOR_STORE, else the config's
    `store`; None (or "sqlite") is the SQLite store."""
    from_env = (os.environ if env is None else env).get(STORE_ENV)
    return postgres_url(flag or from_env or config.store)


def _load(args: argparse.Namespace) -> tuple[Config, list[Credential]]:
    config = load_config(args.config)
    creds = load_credentials(args.token_file)
    return config, creds


def _accepted(creds: list[Credential]) -> str:
    """What `check` says of the credentials: how many, by role, and the plain ones."""
    roles = {r: sum(1 for c in creds if c.role == r) for r in ("admin", "driver", "reader")}
    by_role = ", ".join(f"{n} {r}" for r, n in roles.items() if n)
    plain = sum(1 for c in creds if c.plain)
    hint = f"; {plain} plain (store their hash: lane-coordinator token add)" if plain else ""
    return f"{_count(len(creds), 'credential')} accepted ({by_role}{hint})"


def _warn_plain(creds: list[Credential]) -> None:
    """The older plain-token lines work (as admin) but are stored in the clear: say so."""
    plain = [c.name for c in creds if c.plain]
    if plain:
        log.warning(
            "auth.plain_tokens",
            count=len(plain),
            names=plain,
            hint="plain tokens are admin credentials stored in the clear: make one credential "
            "per computer with `lane-coordinator token add NAME --role driver --machine ID "
            "--token-file PATH` (it stores sha256:<hex> lines), then remove the plain lines",
        )


def _postgres_url(args: argparse.Namespace, what: str) -> str:
    url = resolve_store(args.store, load_config(args.config))
    if url is None:
        raise ConfigError(f"{what}: needs a postgresql:// store (--store or ${STORE_ENV})")
    return url


def migrate_cmd(args: argparse.Namespace) -> int:
    url = _postgres_url(args, "migrate")
    applied = migrate(url)
    done = ", ".join(applied) if applied else "nothing to apply"
    print(f"ok: {store_label(url)} migrated ({done}); schema version {migrations()[-1][0]}")
    return 0


def import_cmd(args: argparse.Namespace) -> int:
    from coordinator.store.importer import import_data_dir

    url = _postgres_url(args, "import")
    if not args.source.is_dir():
        raise ConfigError(f"import: {args.source} is not a directory")
    report = import_data_dir(args.source, url, lanes=args.lanes)
    print(report.summary())
    return 0 if report.ok else 1


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _config_counts(config: Config) -> str:
    """ "2 routes, 1 lane override)" — check's summary of the config it read."""
    return f"{_count(len(config.routes), 'route')}, {_count(len(config.lanes), 'lane override')})"


def check(args: argparse.Namespace) -> int:
    config, creds = _load(args)
    url = resolve_store(args.store, config)
    if url is not None:
        storage = PostgresStorage(url, stall_seconds=config.replica_stall_seconds)
        try:
            storage.start()  # reachable, migrated, not edited, not newer
            version = migrations()[-1][0]
        finally:
            storage.stop()
        print(
            f"ok: config valid ({_config_counts(config)}, {_accepted(creds)}, database "
            f"{store_label(url)} at schema version {version}; would listen on "
            f"{args.host}:{args.port}"
        )
        return 0
    data_dir = sqlite_data_dir(args.data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"data dir: {data_dir} is not a directory")
    refused = data_dir_refused(data_dir)  # `serve` would refuse it (a probe: nothing is kept)
    if refused is not None:
        raise ConfigError(refused)
    lanes = []
    if data_dir.is_dir():
        lanes = [
            (p, lane)
            for p in sorted(data_dir.iterdir())
            if (lane := lane_from_file_name(p.name)) is not None
        ]
    with tempfile.TemporaryDirectory(prefix="lane-check-") as scratch:
        # Migrations applied to a scratch copy of every lane file (and to a new empty lane).
        targets = [(Path(scratch) / "check+empty.sqlite", "check:empty")]
        for path, lane in lanes:
            copy = Path(scratch) / path.name
            copy_lane_file(path, copy)
            targets.append((copy, lane))
        for path, lane in targets:
            store = SqliteLaneStore(path, lane)
            try:
                store.open()
                version = store.schema_version()
            except LaneError as exc:
                raise ConfigError(f"migrations: {lane}: {exc.message}") from exc
            finally:
                store.close()
    enforced = sorted(set(config.routes)) + sorted(config.lanes)
    print(
        f"ok: config valid ({_config_counts(config)}, {_accepted(creds)}, migrations apply "
        f"cleanly to {_count(len(targets) - 1, 'lane file')} (schema version {version}); "
        f"enforced: {', '.join(enforced) or 'none'}; "
        f"would listen on {args.host}:{args.port}"
    )
    return 0


# Descriptors besides the connections and the lanes' own budget (coordinator/actor/
# descriptors.py): the listening socket, the lock, the presence store, logs.
FD_HEADROOM = 256
NOFILE_CEILING = 1 << 20  # the soft limit set when the hard one is unlimited
_ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _raise_open_file_limit(max_connections: int) -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (never lower it) and log both: lanes
    and connections then live under the largest descriptor budget the process may have (the
    systemd unit sets LimitNOFILE). Warn when that leaves less than max_connections plus
    headroom."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        was = soft
        target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (OSError, ValueError):
        return
    log.info(
        "process.open_file_limit",
        soft=soft,
        hard="unlimited" if hard == resource.RLIM_INFINITY else hard,
        was=was,
    )
    want = max_connections + FD_HEADROOM
    if soft != resource.RLIM_INFINITY and soft < want:
        log.warning(
            "http.open_file_limit",
            limit=soft,
            max_connections=max_connections,
            hint="raise LimitNOFILE (systemd) or ulimit -n, or lower max_connections",
        )


def _loop_exception_handler(
    debug: bool,
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """accept() out of descriptors (EMFILE and the like) as one rate-limited warning line, not
    asyncio's traceback per retry (asyncio stops accepting for a second and tries again).
    Anything else the loop reports: one error line (asyncio's own report at --log-level
    debug)."""
    from coordinator.logs import RateLimitedLog

    accept_failed = RateLimitedLog("http.accept_failed")

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS:
            accept_failed(
                error=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
                hint="the open-file limit is reached: new connections wait",
            )
            return
        if debug:
            loop.default_exception_handler(context)
            return
        log.error(
            "loop.error",
            message=context.get("message"),
            error=type(exc).__name__ if exc is not None else None,
        )

    return handle


async def _serve(args: argparse.Namespace) -> int:
    from coordinator.http.app import create_app
    from coordinator.http.server import LaneRunner

    config, creds = _load(args)
    url = resolve_store(args.store, config)
    if url is None:
        sqlite_data_dir(args.data_dir)  # ConfigError before anything starts
    _warn_plain(creds)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_exception_handler(args.log_level.lower() == "debug"))
    _raise_open_file_limit(config.max_connections)
    app = create_app(config, Credentials(creds), args.data_dir, store=url or SQLITE)
    runner = LaneRunner(app, config, kind=ACTOR_POSTGRES if url else ACTOR_SQLITE)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_port=args.reuse_port or None)
    try:
        await site.start()
    except OSError as exc:  # the port is taken, the host is not on this machine, ...
        await runner.cleanup()
        print(f"lane-coordinator: {_listen_failure(args.host, args.port, exc)}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    # SIGHUP re-reads --token-file: rotation needs no restart (docs/operator.md).
    with contextlib.suppress(NotImplementedError, AttributeError):
        loop.add_signal_handler(signal.SIGHUP, _reload_tokens, args.token_file, app)
    port = runner.addresses[0][1] if runner.addresses else args.port  # the real one for --port 0
    # Only now, once the socket is bound: a failed start never logs "started".
    log.info(
        "coordinator.started",
        version=__version__,
        store=store_label(url),
        data_dir=str(args.data_dir) if url is None else None,
        address=_address(args.host, port),
    )
    print(f"lane-coordinator listening on http://{args.host}:{port}", file=sys.stderr)
    await stop.wait()
    try:
        await asyncio.wait_for(runner.cleanup(), timeout=C.SHUTDOWN_GRACE_SECONDS)
    except TimeoutError:
        print("lane-coordinator: shutdown grace period ran out", file=sys.stderr)
    return 0


def workers(args: argparse.Namespace) -> int:
    """`serve --workers N`: refused on the SQLite store (one lane file has one server
    process), else N workers on one port (coordinator/workers.py)."""
    from coordinator.workers import run_workers

    config, _ = _load(args)
    if resolve_store(args.store, config) is None:
        raise ConfigError(
            "--workers needs the PostgreSQL store (--store postgresql://...): on SQLite one "
            "process serves the lane files (docs/performance.md#one-sqlite-process)"
        )
    try:
        return run_workers(args)
    except OSError as exc:
        print(f"lane-coordinator: {_listen_failure(args.host, args.port, exc)}", file=sys.stderr)
        return 1


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen_failure(host: str, port: int, exc: OSError) -> str:
    """One line: which address, and why (asyncio's own text is a Python tuple)."""
    code = exc.errno or 0  # getaddrinfo's codes are negative, with their own strerror
    why = os.strerror(code).lower() if code > 0 else (exc.strerror or str(exc))
    hint = ""
    if exc.errno == errno.EADDRINUSE:
        hint = " (another process is listening there: stop it or choose another --port)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        hint = " (that address is not on this machine: check --host)"
    elif exc.errno == errno.EACCES:
        hint = " (ports below 1024 need privileges: choose another --port)"
    return f"cannot listen on {_address(host, port)}: {why}{hint}"


def _reload_tokens(token_file: Path | None, app: web.Application) -> None:
    """SIGHUP: swap in the token file's credentials; on any problem keep the current ones."""
    from coordinator.http.middleware import CREDENTIALS_KEY

    if token_file is None:
        log.warning("auth.tokens_reload_skipped", reason="no --token-file; restart to change")
        return
    current = app[CREDENTIALS_KEY]
    try:
        creds = load_credentials(token_file)
    except ConfigError as exc:  # the message names the file and lines, never a token
        log.error("auth.tokens_reload_failed", error=str(exc), kept=len(current))
        return
    before = {c.name for c in current.all}
    current.replace(creds)  # what auth reads on every request, swapped at once
    names = {c.name for c in creds}
    log.info(
        "auth.tokens_reloaded",
        count=len(creds),
        added=sorted(names - before),
        removed=sorted(before - names),
    )
    _warn_plain(creds)


def backup(args: argparse.Namespace) -> int:
    """Online: a read-only SQLite backup of every lane file (one consistent snapshot per
    file, writers keep going), written as NAME.partial and renamed when complete."""
    dest: Path = args.dest
    if dest.resolve() == args.data_dir.resolve():
        raise ConfigError("backup: DEST must not be the data dir")
    make_private_dir(dest)
    count = 0
    for path in sorted(args.data_dir.iterdir()):
        lane = lane_from_file_name(path.name)
        if lane is None or not path.is_file():
            continue
        partial = dest / (path.name + ".partial")
        partial.unlink(missing_ok=True)
        copy_lane_file(path, partial)
        os.replace(partial, dest / path.name)
        count += 1
    print(f"ok: backed up {_count(count, 'lane file')} to {dest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(getattr(args, "log_level", "info"))
    if args.command in ("serve", "backup"):
        os.umask(PRIVATE_UMASK)  # whatever it creates is its owner's only (lane files, backups)
    try:
        if args.command == "check":
            return check(args)
        if args.command == "backup":
            return backup(args)
        if args.command == "migrate":
            return migrate_cmd(args)
        if args.command == "import":
            return import_cmd(args)
        if args.command == "token":
            return token_cmd(args)
        if args.workers > 1:
            return workers(args)
        return asyncio.run(_serve(args))
    except ConfigError as exc:
        print(f"lane-coordinator: {exc}", file=sys.stderr)
        return 2
    except LaneError as exc:
        print(f"lane-coordinator: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # what failed, and on which file
        where = f": {exc.filename}" if exc.filename else ""
        print(f"lane-coordinator: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # no traceback on the operator's terminal
        print(f"lane-coordinator: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
