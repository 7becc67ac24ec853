"""Enrolling this computer: `lane setup URL MACHINE_ID` (checks the token against the
coordinator first — that it is accepted, and that it is a driver credential this machine may
use (docs/client.md#setup) — then stores it and writes client.env) and `lane dashboard` (opens
the control room, a token to the clipboard — LANE_READ_TOKEN when set, a reader credential —
never in a URL, an argv or the output)."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import shutil
import subprocess
import sys
import webbrowser

from client.api import LaneClient
from client.cli.exits import EXIT_FAIL, EXIT_OK, EXIT_PRE_PROVIDER, UsageError
from client.cli.render import emit_json, keep_secret, out, say
from client.config import (
    CLIENT_ENV_NAME,
    ENV_ACCOUNT,
    ENV_MACHINE,
    ENV_READ_TOKEN,
    ENV_REQUIRED,
    ENV_URL,
    TOKEN_FILE_NAME,
    Settings,
    keyring_set,
    load_settings,
    read_env_file,
    write_private_file,
)
from client.errors import LaneClientError, MachineMismatchError, NotFoundError, PreProviderError
from client.models import StatusReply
from client.transport import safe_url
from coordinator.constants import MIN_TOKEN_BYTES
from coordinator.protocol.errors import LaneError
from coordinator.protocol.names import MACHINE_RE, parse_lane

CLIPBOARD_TOOLS: tuple[tuple[str, ...], ...] = (
    ("wl-copy",),
    ("xclip", "-selection", "clipboard"),
    ("xsel", "--clipboard", "--input"),
    ("pbcopy",),
)
SETUP_CHECK_LANE = "setup:check"


def read_token(machine_id: str) -> str:
    """This computer's driver credential from a hidden prompt (a terminal) or stdin's first
    line. Called before the event loop starts (asyncio.run turns Ctrl-C into a task cancel
    that a blocking prompt would only see after Enter): Ctrl-C here raises KeyboardInterrupt
    at once."""
    if sys.stdin.isatty():
        say(f"lane: paste this computer's driver credential: the token the coordinator's "
            f"operator made with `lane-coordinator token add {machine_id} --role driver "
            f"--machine {machine_id} --token-file PATH`")  # fmt: skip
        return getpass.getpass("Driver credential token (input hidden): ").strip()
    return (sys.stdin.readline() or "").strip()


async def cmd_setup(args: argparse.Namespace) -> int:
    url = args.url.strip().rstrip("/")
    if not (url.startswith("http://") or url.startswith("https://")):
        raise UsageError("URL: must start with http:// or https://")
    if not MACHINE_RE.match(args.machine_id):
        raise UsageError("MACHINE_ID: must be 1-64 of [A-Za-z0-9._-]")
    token: str = args.token_input
    if not token:
        say("lane: setup: no token given (type it at the prompt, or pipe it on stdin)")
        return EXIT_FAIL
    keep_secret(token)
    if len(token.encode()) < MIN_TOKEN_BYTES:
        say(f"lane: setup: that token is {len(token.encode())} bytes; coordinator tokens are "
            f"at least {MIN_TOKEN_BYTES}")  # fmt: skip
        return EXIT_FAIL
    # Verify first, write after: a token the coordinator rejects (or a coordinator that cannot
    # be reached, or is not the shared one) leaves no token, keyring entry or client.env.
    lane = args.lane or SETUP_CHECK_LANE
    try:
        parse_lane(lane)
    except LaneError as exc:
        raise UsageError(exc.message) from None
    client = LaneClient(url, token, args.machine_id, None, timeout=args.timeout or 10.0,
                        required=True)  # fmt: skip
    try:
        st = await _check(client, lane, args.machine_id)
    finally:
        await client.close()
    if st is None:
        say("lane: setup: nothing was written (no token stored, settings unchanged)")
        return EXIT_PRE_PROVIDER
    base = load_settings(mint_claim=False, use_keyring=False)
    cdir = base.config_dir
    backend = keyring_set(url, token)
    if backend is not None:
        say(f"lane: token stored in the OS keyring ({backend})")
    else:
        write_private_file(cdir / TOKEN_FILE_NAME, token + "\n")
        say(f"lane: no OS keyring works here; token stored in {cdir / TOKEN_FILE_NAME} (mode 0600)")
    env_path = cdir / CLIENT_ENV_NAME
    values = read_env_file(env_path)
    values.pop("LANE_TOKEN", None)
    values[ENV_URL] = url
    values[ENV_MACHINE] = args.machine_id
    if args.account:
        values[ENV_ACCOUNT] = args.account
    if args.not_required:
        values.pop(ENV_REQUIRED, None)
    else:
        values[ENV_REQUIRED] = "1"
    text = "# lane client settings (non-secret), written by `lane setup`\n" + "".join(
        f"{k}={v}\n" for k, v in values.items()
    )
    write_private_file(env_path, text)
    say(f"lane: settings written to {env_path} (mode 0600)")
    if args.json:
        emit_json({
            "coordinator": st.coordinator, "url": safe_url(url), "machineId": args.machine_id,
            "account": values.get(ENV_ACCOUNT), "required": ENV_REQUIRED in values,
            "tokenStored": f"keyring ({backend})" if backend else str(cdir / TOKEN_FILE_NAME),
            "settingsFile": str(env_path),
        })  # fmt: skip
    else:
        out(f'"coordinator": "{st.coordinator}"')
    say(f"lane: {safe_url(url)} answers as the shared coordinator; this computer is "
        f"{args.machine_id}")  # fmt: skip
    return EXIT_OK


async def _check(client: LaneClient, lane: str, machine_id: str) -> StatusReply | None:
    """The coordinator accepts the token and is the shared one (an authenticated read that
    creates nothing), and the token is a credential this machine may drive with; None (and
    why, said) otherwise."""
    try:
        try:
            st = await client.status(lane)
        except LaneClientError as exc:
            inner = exc.underlying if isinstance(exc, PreProviderError) else exc
            if not isinstance(inner, MachineMismatchError):
                raise
            await _credential_refused(client, machine_id)  # which machine it is bound to
            return None
        return None if await _credential_refused(client, machine_id) else st
    except LaneClientError as exc:
        say(f"lane: setup check failed: {exc}")
        return None


async def _credential_refused(client: LaneClient, machine_id: str) -> str | None:
    """What the coordinator says of the token (GET /v1/whoami): a reader, or a driver bound to
    another machine, cannot drive this computer (refused: why); an admin or an unbound driver
    can, with a note. None when it may be stored."""
    try:
        me = await client.whoami()
    except NotFoundError:  # an older coordinator: no roles to check
        say("lane: setup: the coordinator does not say the credential's role (no /v1/whoami)")
        return None
    named = f"credential {me.name!r} (role {me.role})"
    make = f"lane-coordinator token add {machine_id} --role driver --machine {machine_id}"
    if me.role == "reader":
        say(
            f"lane: setup: {named} reads only: a driver computer needs a driver credential ({make})"
        )
        return "reader"
    if me.machine is not None and me.machine != machine_id:
        say(
            f"lane: setup: {named} is bound to machine {me.machine!r}, not {machine_id!r}: run "
            f"`lane setup URL {me.machine}`, or ask for a credential bound to {machine_id} ({make})"
        )
        return "machine"
    if me.role == "admin":
        say(
            f"lane: setup: warning: {named} acts for any machine; a driver computer is better "
            f"served by its own driver credential, bound to it ({make})"
        )
    elif me.machine is None:
        say(
            f"lane: setup: note: {named} is bound to no machine; one bound to {machine_id} "
            f"makes every machineId it writes a fact ({make})"
        )
    else:
        say(f"lane: setup: {named}, bound to this machine")
    return None


def cmd_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.url:
        say(f"lane: dashboard: {ENV_URL} is unset (run `lane setup URL MACHINE_ID`)")
        return EXIT_PRE_PROVIDER if settings.required else EXIT_FAIL
    page = f"{safe_url(settings.url)}/control-room"
    copied = None
    # the control room reads only: a reader credential (LANE_READ_TOKEN) is the one to paste
    token, source = settings.read_token, f"${ENV_READ_TOKEN}"
    if not token:
        token, source = settings.token, settings.token_source
    if token:
        for tool in CLIPBOARD_TOOLS:
            exe = shutil.which(tool[0])
            if exe is None:
                continue
            try:
                done = subprocess.run(
                    [exe, *tool[1:]],
                    input=token.encode(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=5,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            if done.returncode == 0:
                copied = tool[0]
                break
    opened = False
    with contextlib.suppress(Exception):
        opened = webbrowser.open(page)
    if args.json:  # never the token: where it is, and where it went
        emit_json({"url": page, "opened": opened, "clipboard": copied,
                   "tokenFrom": settings.token_source if settings.token else None})  # fmt: skip
    else:
        out(page)
    if not opened:
        say(f"lane: open {page} in a browser")
    if copied:
        say(f'lane: token ({source}) copied to the clipboard ({copied}); paste it into '
            '"Unlock ledger"')  # fmt: skip
    elif token:
        say("lane: no clipboard tool (wl-copy, xclip, xsel, pbcopy) worked; paste the token "
            f"into \"Unlock ledger\" from {source}")  # fmt: skip
    else:
        say("lane: no token configured; run `lane setup URL MACHINE_ID` first")
        return EXIT_FAIL
    if not settings.read_token:
        say(f"lane: that is this computer's driver credential: the control room will say it "
            f"can write; set {ENV_READ_TOKEN} to a reader credential "
            "(lane-coordinator token add NAME --role reader)")  # fmt: skip
    return EXIT_OK


__all__ = ["CLIPBOARD_TOOLS", "SETUP_CHECK_LANE", "cmd_dashboard", "cmd_setup"]
