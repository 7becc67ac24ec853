"""The role table (coordinator/http/access.py, docs/protocol.md#credentials): every
authenticated route of the app has a role, the public ones none; each role may call exactly
what the contract lists; a route missing from the table needs admin."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.credentials import Credential, Credentials, Role
from coordinator.http.access import ROUTE_ROLES, check_machine, check_role, needed_role
from coordinator.http.app import create_app
from coordinator.protocol.errors import MachineMismatch, RoleForbidden
from tests.harness import make_config

READ_POSTS = {"lanes_status_op", "lanes_history_op"}
WRITES = {
    f"lanes_{op}_op"
    for op in ("acquire", "await", "heartbeat", "release", "receipt", "cooldown", "reconcile")
}


def _routes(tmp_path: Path) -> dict[str, tuple[str, str]]:
    app = create_app(make_config(), Credentials(), tmp_path / "data")
    out: dict[str, tuple[str, str]] = {}
    for route in app.router.routes():
        if route.method == "HEAD" or route.resource is None or route.name is None:
            continue
        out[route.name] = (route.method, route.resource.canonical)
    return out


def test_every_authenticated_route_has_a_role_and_no_public_one(tmp_path: Path) -> None:
    routes = _routes(tmp_path)
    for name, (_, path) in routes.items():
        protected = path.startswith("/v1/") or path in ("/v1", "/metrics")
        assert (name in ROUTE_ROLES) == protected, (name, path)
    assert set(ROUTE_ROLES) <= set(routes)  # the table names no route the app lacks


def test_each_role_may_call_what_the_contract_lists(tmp_path: Path) -> None:
    routes = _routes(tmp_path)
    reader, driver, admin = (Credential(r.value, r) for r in Role)
    for name in ROUTE_ROLES:
        method, path = routes[name]
        is_get = method == "GET"
        assert (needed_role(name) is Role.READER) == (is_get or name in READ_POSTS), name
        assert (needed_role(name) is Role.DRIVER) == (name in WRITES), name
        for cred in (driver, admin):
            check_role(cred, name, method, path)  # may call every route
        if needed_role(name) is Role.READER:
            check_role(reader, name, method, path)
        else:
            with pytest.raises(RoleForbidden) as exc:
                check_role(reader, name, method, path)
            assert f"{method} {path}" in exc.value.message


def test_a_route_missing_from_the_table_needs_admin() -> None:
    assert needed_role("lanes_something_new") is Role.ADMIN and needed_role(None) is Role.ADMIN
    with pytest.raises(RoleForbidden):
        check_role(Credential("d", Role.DRIVER), "lanes_something_new", "POST", "/v1/x")
    check_role(Credential("a", Role.ADMIN), "lanes_something_new", "POST", "/v1/x")


def test_a_bound_credential_names_only_its_machine() -> None:
    bound = Credential("studio-a", Role.DRIVER, "studio-a")
    check_machine(bound, "studio-a")
    check_machine(bound, None)  # a read body without machineId
    with pytest.raises(MachineMismatch):
        check_machine(bound, "studio-b")
    for free in (Credential("farm", Role.DRIVER), Credential("ops", Role.ADMIN)):
        check_machine(free, "studio-b")
