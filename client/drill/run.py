"""Running one role of `lane drill` (`run_drill`): preflight and rendezvous, the steps in
order (1, 2, 3, 4, 5, 3b, 6, 7, and 8 with --partition), then the cleanup — every ticket the
drill made is released, also after a failure, SIGINT or SIGTERM — and a summary (JSON with
--json). Exit 0 all passed, 1 a failure, 3 pre-provider, 130 interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Awaitable, Callable

import aiohttp

from client.config import Settings
from client.drill.common import (
    DEFAULT_PARTNER_TIMEOUT,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PRE_PROVIDER,
    WORDING,
    DrillFailed,
    PartnerTimeout,
    StepResult,
)
from client.drill.partition import step8
from client.drill.refusals import require_shared_url
from client.drill.role import DrillRole
from client.drill.step_7 import step7
from client.drill.steps_1_4 import step1, step2, step3, step3b, step4
from client.drill.steps_5_6 import step5, step6
from client.errors import BadRequestError, LaneClientError, PreProviderError

Step = Callable[[DrillRole], Awaitable[StepResult]]
STEPS: tuple[tuple[str, Step], ...] = (
    ("1", step1),
    ("2", step2),
    ("3", step3),
    ("4", step4),
    ("5", step5),
    ("3b", step3b),
    ("6", step6),
    ("7", step7),
)
PARTITION_STEP: tuple[str, Step] = ("8", step8)


async def run_steps(drill: DrillRole) -> None:
    """The steps in order; a failed step is reported and ends the run."""
    steps = [*STEPS, PARTITION_STEP] if drill.partition else list(STEPS)
    for name, fn in steps:
        try:
            drill.report(await fn(drill))
        except (DrillFailed, LaneClientError) as exc:
            drill.report(StepResult(name, False, str(exc)))
            raise


async def run_drill(
    settings: Settings,
    lane: str,
    barrier_lane: str,
    role: str,
    *,
    timeout: float = DEFAULT_PARTNER_TIMEOUT,
    partition: bool = False,
    json_out: bool = False,
    emit: Callable[[str], None],
    warn: Callable[[str], None],
) -> int:
    """Run one role; the exit code (0 all passed, 1 a failure, 3 pre-provider, 130 interrupted)."""
    if role not in ("a", "b"):
        raise BadRequestError(message="--role: must be a or b")
    require_shared_url(settings, WORDING)
    human = warn if json_out else emit
    session = aiohttp.ClientSession()
    try:
        drill = DrillRole(
            settings,
            lane,
            barrier_lane,
            role,
            timeout=timeout,
            partition=partition,
            session=session,
            emit=human,
        )
    except LaneClientError:
        await session.close()
        raise
    failure: BaseException | None = None
    interrupted = False
    loop = asyncio.get_running_loop()
    keeper: asyncio.Task[None] | None = None
    main = asyncio.create_task(_role_main(drill))

    def on_signal() -> None:
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            warn(f"lane: drill interrupted — releasing every ticket of role {role.upper()}")
            main.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        keeper = asyncio.create_task(drill.keepalive())
        try:
            await main
        except asyncio.CancelledError:
            if not interrupted:
                raise
        except (DrillFailed, LaneClientError) as exc:
            failure = exc
        keeper.cancel()
        ok_steps = failure is None and not interrupted
        cleanup_ok, cleanup_detail = await drill.finish(ok_steps)
        drill.emit(f"{'PASS' if cleanup_ok else 'FAIL'}  cleanup  [{drill.me}] {cleanup_detail}")
    finally:
        if keeper is not None:
            keeper.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        await drill.client.close()
        await session.close()

    passed = [r for r in drill.results if r.ok]
    ok = ok_steps and cleanup_ok
    numbered = sorted({r.step for r in passed}, key=lambda s: (int(s.rstrip("b")), s))
    summary = (
        f"drill {'passed' if ok else 'FAILED'}: role {drill.me} on {lane}, run "
        f"{drill.run_id or '-'}: {len(passed)}/{len(drill.results)} checks passed "
        f"(steps {', '.join(numbered) or 'none'}), cleanup {'ok' if cleanup_ok else 'FAILED'}"
    )
    if interrupted:
        summary += " — interrupted"
    elif isinstance(failure, PartnerTimeout):
        summary += f" — {failure}"
    if json_out:
        emit(
            json.dumps(
                {
                    "lane": lane,
                    "barrierLane": barrier_lane,
                    "role": role,
                    "runId": drill.run_id or None,
                    "machineId": settings.machine_id,
                    "partner": drill.partner_machine,
                    "ok": ok,
                    "interrupted": interrupted,
                    "steps": [
                        {"step": r.step, "ok": r.ok, "detail": r.detail, "data": r.data}
                        for r in drill.results
                    ],
                    "cleanup": {"ok": cleanup_ok, "detail": cleanup_detail},
                    "tickets": sorted(drill.made),
                    "barrierTickets": list(drill.barrier.made),
                },
                indent=2,
            )
        )
    human(summary)
    if interrupted:
        return EXIT_INTERRUPTED
    if ok:
        return EXIT_OK
    if isinstance(failure, PreProviderError):
        return EXIT_PRE_PROVIDER
    return EXIT_FAIL


async def _role_main(drill: DrillRole) -> None:
    try:
        what = await drill.preflight()
        drill.note(
            f"role {drill.me} as machine {drill.client.machine_id} (claim "
            f"{drill.client.claim_id}); {what}; barrier lane {drill.barrier_lane}"
        )
        await drill.rendezvous()
    except (DrillFailed, LaneClientError) as exc:
        drill.report(StepResult("0", False, str(exc)))
        raise
    await run_steps(drill)


__all__ = ["run_drill", "run_steps"]
