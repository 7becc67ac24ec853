"""The lane-refusal rules `lane drill` and `lane self-test` share (client/drill/refusals.py):
one set of checks, each tool's own words — the messages are the ones each tool printed before
the rules were shared."""

from __future__ import annotations

import dataclasses

import pytest

from client.config import Settings, load_settings
from client.drill import DrillRefusedError, SelfTestRefusedError, drill_lanes, self_test_lane
from client.drill.common import WORDING as DRILL
from client.drill.refusals import FORBIDDEN_ACCOUNTS, lane_refusal, require_shared_url
from client.drill.selftest import WORDING as SELF_TEST
from client.errors import PreProviderError
from client.models import StatusReply


def settings(account: str | None = None, url: str | None = "http://127.0.0.1:9") -> Settings:
    base = load_settings(mint_claim=False, use_keyring=False)
    return dataclasses.replace(base, account=account, url=url)


def status(
    kind: str = "actor-sqlite", enforced: bool = True, capacity: int | None = 1
) -> StatusReply:
    return StatusReply(coordinator=kind, lane="drill:x", enforced=enforced, capacity=capacity,
                       held=[], queued=[], queued_total=0, pause=None, now=1.0)  # fmt: skip


def test_the_production_account_is_refused_whatever_the_flags() -> None:
    assert "main-unlimited" in FORBIDDEN_ACCOUNTS
    with pytest.raises(DrillRefusedError) as d:
        drill_lanes(None, "drill", "main-unlimited", settings())
    assert str(d.value) == (
        "drill-refused: drill refuses account 'main-unlimited': it is the production account; "
        "use a dedicated drill lane such as drill:acceptance"
    )
    with pytest.raises(SelfTestRefusedError) as s:
        self_test_lane("self-test:main-unlimited", None, None, settings())
    assert str(s.value) == (
        "self-test-refused: self-test refuses account 'main-unlimited': it is the production "
        "account; use a dedicated test account (default 'self-test', or LANE_SELF_TEST_ACCOUNT)"
    )


def test_lane_account_is_refused() -> None:
    with pytest.raises(DrillRefusedError) as d:
        drill_lanes("drill:studio", None, None, settings("studio"))
    assert d.value.message == (
        "drill refuses account 'studio': it is this computer's LANE_ACCOUNT (the account real "
        "renders use); use a dedicated drill lane such as drill:acceptance"
    )
    with pytest.raises(SelfTestRefusedError) as s:
        self_test_lane(None, None, "studio", settings("studio"))
    assert s.value.message == (
        "self-test refuses account 'studio': it is this computer's LANE_ACCOUNT (the account "
        "real renders use); use a dedicated test account"
    )
    assert drill_lanes(None, None, None, settings("studio")) == (
        "drill:acceptance",
        "drill:acceptance-barrier",
    )
    assert self_test_lane(None, None, None, settings("studio")) == "self-test:self-test"


def test_no_shared_coordinator_is_a_pre_provider_error() -> None:
    with pytest.raises(PreProviderError, match="the drill needs the shared coordinator"):
        require_shared_url(settings(url=None), DRILL)
    with pytest.raises(PreProviderError, match="self-test needs the shared coordinator"):
        require_shared_url(settings(url=None), SELF_TEST)
    require_shared_url(settings(), DRILL)


@pytest.mark.parametrize(
    ("reply", "drill", "self_test"),
    [
        (status("local-sqlite"),
         "the coordinator reports 'local-sqlite', not a shared kind ['actor-postgres', "
         "'actor-sqlite']: the drill needs the shared coordinator",
         "coordinator is 'local-sqlite'"),
        (status(enforced=False, capacity=None),
         "drill:x is unenforced here (its route has no capacity configured); the drill needs an "
         'enforced lane with capacity 1, e.g. drill:acceptance with [routes."drill"] capacity = 1',
         "drill:x is unenforced here: its route has no capacity configured"),
        (status(capacity=2),
         "drill:x has capacity 2; the drill needs capacity 1",
         "drill:x has capacity 2; self-test needs 1"),
        (status(), None, None),
        (status("actor-postgres"), None, None),
    ],
)  # fmt: skip
def test_lane_refusals_in_each_tools_words(
    reply: StatusReply, drill: str | None, self_test: str | None
) -> None:
    assert lane_refusal(reply, "drill:x", DRILL) == drill
    assert lane_refusal(reply, "drill:x", SELF_TEST) == self_test
