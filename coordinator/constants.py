"""Every interval, limit and default of the coordinator, named once, with its unit.

The wire's limits and defaults (what a client sees) live in `coordinator.protocol.constants`
(import them from there); this module holds the server's own tuning.
"""

from typing import Final

from coordinator.protocol.constants import ACTOR_SQLITE, MAX_AWAIT_SECONDS

COORDINATOR_KIND: Final = ACTOR_SQLITE  # what this server's replies say in `coordinator`

# Leases and waiters (seconds)
DEFAULT_WAITER_TIMEOUT_SECONDS: Final = 600.0
DEFAULT_HOLD_SECONDS: Final = 300.0  # ETA basis before a lane has measured holds
# How long after its provider-submitted receipt an ended ticket's job keeps its slot
# (docs/protocol.md#in-flight): route or lane config, 0 (off) to a day.
DEFAULT_IN_FLIGHT_HOLD_SECONDS: Final = 1800.0
MAX_IN_FLIGHT_HOLD_SECONDS: Final = 86400.0
ETA_HOLD_SAMPLE_SIZE: Final = 20  # recent hold durations averaged for the ETA (lane, project)
ETA_HOLD_WINDOW: Final = 200  # the lane's last holds a project's recent holds are taken from
ETA_SIMULATED_TICKETS: Final = 50  # tickets ahead the ETA takes with their own project's hold
ETA_ERROR_GRANTS: Final = 100  # a lane's last grants its etaError is over
# A parked await is a waiter's keep-alive: the waiter timeout must outlast the longest await
# plus this margin (network, a client's retry), or a waiter is abandoned mid-poll.
WAITER_TIMEOUT_MARGIN_SECONDS: Final = 30.0
MIN_WAITER_TIMEOUT_SECONDS: Final = MAX_AWAIT_SECONDS + WAITER_TIMEOUT_MARGIN_SECONDS  # 90
MAX_WAITER_TIMEOUT_SECONDS: Final = 86400.0

# Render log and incidents kept per lane
DEFAULT_HISTORY_RETAINED: Final = 5000  # rows per lane
INCIDENTS_RETAINED: Final = 2000  # rows per lane

# Sizes (bytes)
DEFAULT_MAX_BODY_BYTES: Final = 65536
MIN_TOKEN_BYTES: Final = 32

# Presence and evidence (seconds)
MACHINE_ONLINE_SECONDS: Final = 180.0
EVIDENCE_RECENT_SECONDS: Final = 3600.0

# Actor housekeeping (seconds)
LANE_IDLE_CLOSE_SECONDS: Final = 60.0
LANE_QUIET_SECONDS: Final = 30.0  # a lane with no call this long closes its file (keeps memory)
JANITOR_INTERVAL_SECONDS: Final = 15.0
SHUTDOWN_GRACE_SECONDS: Final = 10.0
STORE_BUSY_TIMEOUT_MS: Final = 5000
OPEN_ATTEMPTS: Final = 200  # opening a lane file another process is switching to WAL
OPEN_RETRY_SECONDS: Final = 0.025  # between those attempts (at most ~5 s in all)
STORE_THREADS: Final = 4
MAILBOX_BATCH_MAX: Final = 256  # commands group-committed in one transaction

# Logging (seconds)
LOG_INTERVAL_SECONDS: Final = 60.0  # a recurring warning: at most one line per minute per event

# Server defaults
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8787

# PostgreSQL replicas (coordinator/store/postgres_storage.py, coordinator/actor/registry.py)
PG_MAX_TRANSACTIONS: Final = 16  # lane transactions (and sessions) one replica runs at once
# `replica_stall_seconds` (docs/protocol.md#replica-stall): a replica that stops responding
# inside a lane transaction blocks the lane on the others for at most this many seconds
# (the database ends its session); every session's timeouts derive from it (postgres_db.py).
DEFAULT_REPLICA_STALL_SECONDS: Final = 5.0
MIN_REPLICA_STALL_SECONDS: Final = 1.0
MAX_REPLICA_STALL_SECONDS: Final = 30.0
# A healthy replica's wait for a lane's lock outlasts the stall by this much, so it never
# gives up on a lane the database is about to free (lock_timeout = stall + this).
LOCK_WAIT_MARGIN_SECONDS: Final = 1.0
ALARM_POLL_SECONDS: Final = 1.0  # every replica looks for lanes whose deadline has come
ALARM_POLL_BATCH: Final = 1000  # lanes woken per poll at most (the rest on the next poll)
LISTEN_HEALTH_SECONDS: Final = 5.0  # the LISTEN session is checked when quiet this long
LISTEN_RETRY_SECONDS: Final = 1.0  # between attempts to open a lost LISTEN session again
PARKED_RECHECK_SECONDS: Final = 5.0  # parked awaits re-check on this timer (a lost NOTIFY)
READY_PROBE_TIMEOUT_SECONDS: Final = 2.0  # /readyz: the database must answer within this

# Machines seen, stored so every replica tells the same story and a restart forgets nothing:
# presence (GET /v1/machines, coordinator/http/presence.py) and each lane's evidence
# (machines seen, coordinator/engine/lane_queue.py). A stored sighting is rewritten at most
# this often per row (a heartbeat loop does not write on every call); a new one at once.
SEEN_WRITE_SECONDS: Final = 30.0
PRESENCE_RECENT_SECONDS: Final = 3600.0  # /v1/machines lists the machines seen this recently
MACHINES_LISTED_MAX: Final = 1000  # machines listed at most (presence, a lane's evidence)
