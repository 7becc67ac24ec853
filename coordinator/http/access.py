"""Which role each route needs, and the machine a bound credential may name
(docs/protocol.md#credentials).

`reader`: every GET under /v1, /metrics, and the status and history reads; `driver`: what a
driver does (acquire, await, heartbeat, release, receipt, cooldown, reconcile) and a reader's
reads; `admin`: everything, for any machine. A route missing from the table needs `admin`
(a new route is closed until it is given a role here); tests/unit/test_access.py checks that
every authenticated route of the app is listed."""

from __future__ import annotations

from coordinator.credentials import Credential, Role
from coordinator.protocol.errors import MachineMismatch, RoleForbidden

# route name (app.py) -> the least role that may call it
ROUTE_ROLES: dict[str, Role] = {
    **{
        f"lanes_{op}_op": Role.DRIVER
        for op in ("acquire", "await", "heartbeat", "release", "receipt", "cooldown", "reconcile")
    },
    "lanes_status_op": Role.READER,
    "lanes_history_op": Role.READER,
    "lanes": Role.READER,
    "incidents": Role.READER,
    "machines": Role.READER,
    "evidence": Role.READER,
    "overview": Role.READER,
    "dashboard": Role.READER,
    "whoami": Role.READER,
    "metrics": Role.READER,
}

_WHO_MAY = {
    Role.READER: "any credential",
    Role.DRIVER: "a driver or admin credential",
    Role.ADMIN: "an admin credential",
}


def needed_role(route_name: str | None) -> Role:
    """The least role that may call the route (admin for one the table does not list)."""
    return ROUTE_ROLES.get(route_name or "", Role.ADMIN)


def check_role(cred: Credential, route_name: str | None, method: str, path: str) -> None:
    """403 role-forbidden when the credential's role does not include the route."""
    needed = needed_role(route_name)
    if not cred.allows(needed):
        raise RoleForbidden(
            f"credential {cred.name!r} (role {cred.role.value}) may not call {method} {path}: "
            f"it needs {_WHO_MAY[needed]}"
        )


def check_machine(cred: Credential, machine_id: str | None) -> None:
    """403 machine-mismatch when a credential bound to one machine names another."""
    if cred.machine is not None and machine_id is not None and machine_id != cred.machine:
        raise MachineMismatch(
            f"machineId: credential {cred.name!r} is bound to machine {cred.machine!r}; "
            f"it may not act as {machine_id!r}"
        )
