"""`lane-coordinator`'s command line: every command, option, its help and its default
(`build_parser`; `coordinator/cli.py` runs the commands)."""

from __future__ import annotations

import argparse
from pathlib import Path

from coordinator import __version__
from coordinator import constants as C
from coordinator.credentials import TOKEN_ENV
from coordinator.token_cli import add_parser as add_token_parser

STORE_ENV = "LANE_COORDINATOR_STORE"
STORE_HELP = (
    "where lanes are kept: 'sqlite' (lane files under --data-dir) or "
    "postgresql://user@host[:port]/db (replicas; password in PGPASSWORD or ~/.pgpass) "
    f"(default: ${STORE_ENV}, else the config's `store`, else sqlite)"
)
LOG_LEVELS = ("debug", "info", "warning", "error")


class _Help(argparse.HelpFormatter):
    """Each option's help ends with its default when it has one — `(default: 8787)`; one that
    comes from elsewhere (the environment, the config) is spelled out in the help itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        d = action.default
        if d is None or d is False or d is argparse.SUPPRESS or "(default:" in text:
            return text
        return f"{text} (default: {str(d).replace('%', '%%')})"


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="URL", help=STORE_HELP)


def _config_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help=what)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=C.DEFAULT_HOST, help="the address to listen on")
    p.add_argument("--port", type=int, default=C.DEFAULT_PORT,
                   help="the TCP port to listen on (0: one the OS picks)")  # fmt: skip
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the lane files, one SQLite file per lane (required with the sqlite store)",
    )
    _store_arg(p)
    _config_arg(p, "the TOML config: capacities, leases, limits (default: every setting at "
                "its default, no route enforced)")  # fmt: skip
    p.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                   help="the credentials, one per line (sha256:<hex> name= role= "
                   "[machine=]; `lane-coordinator token add` makes them; mode 0600), re-read "
                   f"on SIGHUP (default: ${TOKEN_ENV}, the same lines)")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS,
                   type=str.lower, help="the JSON log's level, on stderr")  # fmt: skip


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".",
                          formatter_class=_Help)  # fmt: skip


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lane-coordinator",
        description="The lane coordinator: leases on shared provider accounts.",
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"lane-coordinator {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = _command(sub, "serve", "run the coordinator")
    _common(serve)
    serve.add_argument("--workers", type=_positive, default=1, metavar="N",
                       help="PostgreSQL store only: N replica processes sharing --port "
                       "(SO_REUSEPORT; docs/operator.md)")  # fmt: skip
    serve.add_argument("--reuse-port", action="store_true",
                       help="bind with SO_REUSEPORT: other processes may listen on the same "
                       "port")  # fmt: skip
    _common(_command(sub, "check", "dry run: validate the config, token, data dir and "
                     "migrations (on scratch copies); nothing is written"))  # fmt: skip
    b = _command(sub, "backup", "consistent online copies of every lane file")
    b.add_argument("dest", type=Path, metavar="DEST",
                   help="the folder the copies go to (created 0700 when missing); "
                   "never the data dir")  # fmt: skip
    b.add_argument("--data-dir", type=Path, required=True, metavar="DIR",
                   help="the data dir whose lane files are copied (the server may be "
                   "running)")  # fmt: skip
    m = _command(sub, "migrate", "apply the PostgreSQL migrations (replicas)")
    _store_arg(m)
    _config_arg(m, "read `store` from this config")
    i = _command(sub, "import", "copy SQLite lane files into a PostgreSQL store")
    i.add_argument("--from", dest="source", type=Path, required=True, metavar="DATA_DIR",
                   help="the SQLite data dir to copy (no server may hold it)")  # fmt: skip
    i.add_argument(
        "--lane",
        dest="lanes",
        action="append",
        default=None,
        metavar="LANE",
        help="import only this lane (repeatable; default: every lane file)",
    )
    _store_arg(i)
    _config_arg(i, "read `store` from this config")
    add_token_parser(sub)
    return parser
