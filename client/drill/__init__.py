"""The acceptance checks a driver computer runs against the shared coordinator
(docs/protocol.md#acceptance-drill; no provider, no credits): `lane drill --role a|b` (two
computers, steps 1-7, and 8 with --partition) and `lane self-test` (one computer, the engine
checks). Both refuse the same lanes — the rules are written once, in refusals.py.

| module | what |
|---|---|
| run.py | `run_drill`: one role, its steps in order, cleanup, summary |
| role.py | `DrillRole`: a role's client and tickets, preflight, rendezvous, cleanup |
| steps_1_4.py, steps_5_6.py | steps 1-6, one function each |
| step_7.py | step 7: the in-flight hold (the slot outlives the lease) |
| partition.py | step 8 (`--partition`): B's network cut mid-lease |
| barrier.py | the rendezvous through the coordinator (barrier-lane tickets) |
| common.py | constants, errors, check helpers, `drill_lanes` |
| refusals.py | production account, LANE_ACCOUNT, unenforced, not-shared: refused |
| selftest.py | `run_self_test`, `self_test_lane` |
"""

from __future__ import annotations

from client.drill.common import (
    DEFAULT_DRILL_LANE,
    DEFAULT_PARTNER_TIMEOUT,
    DrillRefusedError,
    drill_lanes,
)
from client.drill.refusals import FORBIDDEN_ACCOUNTS
from client.drill.run import run_drill
from client.drill.selftest import SelfTestRefusedError, run_self_test, self_test_lane

__all__ = [
    "DEFAULT_DRILL_LANE",
    "DEFAULT_PARTNER_TIMEOUT",
    "FORBIDDEN_ACCOUNTS",
    "DrillRefusedError",
    "SelfTestRefusedError",
    "drill_lanes",
    "run_drill",
    "run_self_test",
    "self_test_lane",
]
