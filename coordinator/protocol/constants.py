"""The wire's limits and defaults: what a request may carry and what a reply is bounded by.

Every number a client can see or must respect is defined here once; the server's own tuning
(actor housekeeping, store retries, config ranges) stays in `coordinator.constants`, which
does not re-export these: import them from here.
"""

from typing import Final

PROTOCOL_VERSION: Final = 1
SUPPORTED_PROTOCOLS: Final = (1,)

# What a reply's `coordinator` says: who answered. A shared coordinator is one server on SQLite
# or replicas on PostgreSQL; the client's local single-computer queue is not shared.
ACTOR_SQLITE: Final = "actor-sqlite"
ACTOR_POSTGRES: Final = "actor-postgres"
LOCAL_SQLITE: Final = "local-sqlite"
SHARED_KINDS: Final = frozenset({ACTOR_SQLITE, ACTOR_POSTGRES})

# Leases (seconds): a request's leaseSeconds, and the server's default when it names none
DEFAULT_LEASE_SECONDS: Final = 300.0
MIN_LEASE_SECONDS: Final = 15.0
MAX_LEASE_SECONDS: Final = 3600.0

# Await long poll (seconds)
DEFAULT_AWAIT_SECONDS: Final = 30.0
MIN_AWAIT_SECONDS: Final = 1.0
MAX_AWAIT_SECONDS: Final = 60.0

# Cooldown (seconds)
MIN_COOLDOWN_SECONDS: Final = 30.0
MAX_COOLDOWN_SECONDS: Final = 7200.0
COOLDOWN_REASONS: Final = ("provider-human-check",)

# Reads (counts of rows listed). GET query parameters take their defaults and bounds from
# here through their Structs (coordinator/protocol/queries.py).
DEFAULT_HISTORY_LIMIT: Final = 100  # render-log rows (POST history's limit)
MAX_HISTORY_LIMIT: Final = 5000
STATUS_QUEUED_LIMIT: Final = 200  # queued tickets listed by status; queuedTotal says how many
RECENT_RECEIPTS_LIMIT: Final = 50  # receipts
DEFAULT_INCIDENTS_LIMIT: Final = 100  # incidents (GET /v1/incidents' and overview's limit)
MAX_INCIDENTS_LIMIT: Final = 1000
# GET /v1/overview: one bounded read of every lane for the control room's refresh
OVERVIEW_DEFAULT_HISTORY: Final = 50  # render-log rows per lane (the timeline)
OVERVIEW_MAX_HISTORY: Final = 200
OVERVIEW_DEFAULT_QUEUED: Final = 50  # queued tickets listed per lane; queuedTotal says how many
OVERVIEW_DEFAULT_RECEIPTS: Final = 6  # newest receipts per lane (no payload)
OVERVIEW_DEFAULT_LOG_LIMIT: Final = 100  # rows of the render log of the chosen lane(s)
OVERVIEW_MAX_LOG_LIMIT: Final = 500
OVERVIEW_PROJECTS_LIMIT: Final = 100  # projects listed per lane, most recently served first

# Sizes (bytes / characters)
MAX_RECEIPT_PAYLOAD_BYTES: Final = 32 * 1024  # the payload's canonical JSON
MAX_IDENTITY_CHARS: Final = 128  # project, scene, promptHash
MAX_CLAIM_CHARS: Final = 128
MAX_TICKET_ID_CHARS: Final = 200
MAX_RECEIPT_ID_CHARS: Final = 400
MAX_PROVIDER_JOB_CHARS: Final = 256
MAX_NOTE_CHARS: Final = 500
MAX_LANE_CHARS: Final = 129  # route (1-64) + ":" + account (1-64)

# JSON nesting: a receipt payload (the object itself is level 1), and any value of a request
# body, may nest at most this deep; deeper is 400 bad-request naming the field. A stored
# payload deeper than this (written before the bound existed) is read back as a marker.
MAX_JSON_DEPTH: Final = 32
