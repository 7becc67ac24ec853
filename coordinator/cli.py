"""`lane-coordinator serve|check|backup|migrate|import`."""

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
from coordinator.config import Config, load_config, load_tokens
from coordinator.errors import ConfigError
from coordinator.logs import configure_logging
from coordinator.protocol.constants import ACTOR_POSTGRES, ACTOR_SQLITE
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import lane_from_file_name
from coordinator.store.files import copy_lane_file, make_private_dir
from coordinator.store.postgres_db import migrate, migrations
from coordinator.store.postgres_storage import PostgresStorage
from coordinator.store.sqlite import SqliteLaneStore
from coordinator.store.storage import SQLITE, postgres_url, sqlite_data_dir, store_label

log = structlog.get_logger("coordinator.cli")

PRIVATE_UMASK = 0o077


STORE_ENV = "LANE_COORDINATOR_STORE"
STORE_HELP = (
    "where lanes are kept: 'sqlite' (lane files under --data-dir) or "
    "postgresql://user@host[:port]/db (replicas; password in PGPASSWORD or ~/.pgpass); "
    f"default: ${STORE_ENV}, else the config's `store`, else sqlite"
)


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="URL", help=STORE_HELP)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=C.DEFAULT_HOST)
    p.add_argument("--port", type=int, default=C.DEFAULT_PORT)
    p.add_argument(
        "--data-dir", type=Path, default=None, help="lane files (the sqlite store; required there)"
    )
    _store_arg(p)
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--token-file", type=Path, default=None)
    p.add_argument("--log-level", default="info")


def resolve_store(
    flag: str | None, config: Config, env: dict[str, str] | None = None
) -> str | None:
    """The store URL in force: --store, else $LANE_COORDINATOR_STORE, else the config's
    `store`; None (or "sqlite") is the SQLite store."""
    from_env = (os.environ if env is None else env).get(STORE_ENV)
    return postgres_url(flag or from_env or config.store)


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lane-coordinator")
    parser.add_argument("--version", action="version", version=f"lane-coordinator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the coordinator")
    _common(serve)
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="PostgreSQL store only: N replica processes sharing --port (SO_REUSEPORT)",
    )
    serve.add_argument(
        "--reuse-port",
        action="store_true",
        help="bind with SO_REUSEPORT: other processes may listen on the same port",
    )
    _common(sub.add_parser("check", help="dry run: validate config, token and migrations"))
    b = sub.add_parser("backup", help="consistent online copies of every lane file")
    b.add_argument("dest", type=Path)
    b.add_argument("--data-dir", type=Path, required=True)
    m = sub.add_parser("migrate", help="apply the PostgreSQL migrations (replicas)")
    _store_arg(m)
    m.add_argument("--config", type=Path, default=None, help="read `store` from this config")
    i = sub.add_parser("import", help="copy SQLite lane files into a PostgreSQL store")
    i.add_argument("--from", dest="source", type=Path, required=True, metavar="DATA_DIR")
    i.add_argument(
        "--lane",
        dest="lanes",
        action="append",
        default=None,
        metavar="LANE",
        help="import only this lane (repeatable; default: every lane file)",
    )
    _store_arg(i)
    i.add_argument("--config", type=Path, default=None, help="read `store` from this config")
    return parser


def _load(args: argparse.Namespace) -> tuple[Config, list[bytes]]:
    config = load_config(args.config)
    tokens = load_tokens(args.token_file)
    return config, tokens


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


def check(args: argparse.Namespace) -> int:
    config, tokens = _load(args)
    url = resolve_store(args.store, config)
    if url is not None:
        storage = PostgresStorage(url, stall_seconds=config.replica_stall_seconds)
        try:
            storage.start()  # reachable, migrated, not edited, not newer
            version = migrations()[-1][0]
        finally:
            storage.stop()
        print(
            f"ok: config valid ({len(config.routes)} routes, {len(config.lanes)} lane "
            f"overrides), {len(tokens)} token(s) accepted, database {store_label(url)} at "
            f"schema version {version}; would listen on {args.host}:{args.port}"
        )
        return 0
    data_dir = sqlite_data_dir(args.data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"data dir: {data_dir} is not a directory")
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
        f"ok: config valid ({len(config.routes)} routes, {len(config.lanes)} lane overrides), "
        f"{len(tokens)} token(s) accepted, migrations apply cleanly to {len(targets) - 1} "
        f"lane file(s) (schema version {version}); enforced: {', '.join(enforced) or 'none'}; "
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

    config, tokens = _load(args)
    url = resolve_store(args.store, config)
    if url is None:
        sqlite_data_dir(args.data_dir)  # ConfigError before anything starts
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_exception_handler(args.log_level.lower() == "debug"))
    _raise_open_file_limit(config.max_connections)
    app = create_app(config, tokens, args.data_dir, store=url or SQLITE)
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
    """SIGHUP: swap in the token file's tokens; on any problem keep the current ones."""
    from coordinator.http.middleware import TOKENS_KEY

    if token_file is None:
        log.warning("auth.tokens_reload_skipped", reason="no --token-file; restart to change")
        return
    try:
        tokens = load_tokens(token_file)
    except ConfigError as exc:  # the message names the file and sizes, never a token
        log.error("auth.tokens_reload_failed", error=str(exc), kept=len(app[TOKENS_KEY]))
        return
    app[TOKENS_KEY][:] = tokens  # the list auth reads on every request
    log.info("auth.tokens_reloaded", count=len(tokens))


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
    print(f"ok: backed up {count} lane file(s) to {dest}")
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
        if args.workers > 1:
            return workers(args)
        return asyncio.run(_serve(args))
    except ConfigError as exc:
        print(f"lane-coordinator: {exc}", file=sys.stderr)
        return 2
    except LaneError as exc:
        print(f"lane-coordinator: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"lane-coordinator: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # no traceback on the operator's terminal
        print(f"lane-coordinator: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
