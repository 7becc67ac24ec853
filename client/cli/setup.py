"""Enrolling this computer: `lane setup URL MACHINE_ID` (checks the token against the
coordinator first, then stores it and writes client.env) and `lane dashboard` (opens the
control room, the token to the clipboard — never in a URL, an argv or the output)."""

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
    ENV_REQUIRED,
    ENV_URL,
    TOKEN_FILE_NAME,
    Settings,
    keyring_set,
    load_settings,
    read_env_file,
    write_private_file,
)
from client.errors import LaneClientError
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


def read_token() -> str:
    """The token from a hidden prompt (a terminal) or stdin's first line. Called before the
    event loop starts (asyncio.run turns Ctrl-C into a task cancel that a blocking prompt
    would only see after Enter): Ctrl-C here raises KeyboardInterrupt at once."""
    if sys.stdin.isatty():
        return getpass.getpass("Coordinator token (input hidden): ").strip()
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
        st = await client.status(lane)  # an authenticated read; it creates nothing
    except LaneClientError as exc:
        say(f"lane: setup check failed: {exc}")
        say("lane: setup: nothing was written (no token stored, settings unchanged)")
        return EXIT_PRE_PROVIDER
    finally:
        await client.close()
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


def cmd_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.url:
        say(f"lane: dashboard: {ENV_URL} is unset (run `lane setup URL MACHINE_ID`)")
        return EXIT_PRE_PROVIDER if settings.required else EXIT_FAIL
    page = f"{safe_url(settings.url)}/control-room"
    copied = None
    if settings.token:
        for tool in CLIPBOARD_TOOLS:
            exe = shutil.which(tool[0])
            if exe is None:
                continue
            try:
                done = subprocess.run(
                    [exe, *tool[1:]],
                    input=settings.token.encode(),
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
        say(f'lane: token copied to the clipboard ({copied}); paste it into "Unlock ledger"')
    elif settings.token:
        say("lane: no clipboard tool (wl-copy, xclip, xsel, pbcopy) worked; paste the token "
            f"into \"Unlock ledger\" from {settings.token_source}")  # fmt: skip
    else:
        say("lane: no token configured; run `lane setup URL MACHINE_ID` first")
        return EXIT_FAIL
    return EXIT_OK


__all__ = ["CLIPBOARD_TOOLS", "SETUP_CHECK_LANE", "cmd_dashboard", "cmd_setup"]
