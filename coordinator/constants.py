"""Every interval, limit and default of the coordinator, named once, with its unit."""

from typing import Final

PROTOCOL_VERSION: Final = 1
SUPPORTED_PROTOCOLS: Final = (1,)
COORDINATOR_KIND: Final = "actor-sqlite"

# Leases and waiters (seconds)
DEFAULT_LEASE_SECONDS: Final = 300.0
MIN_LEASE_SECONDS: Final = 15.0
MAX_LEASE_SECONDS: Final = 3600.0
DEFAULT_WAITER_TIMEOUT_SECONDS: Final = 600.0
DEFAULT_HOLD_SECONDS: Final = 300.0  # ETA basis before a lane has measured holds
ETA_HOLD_SAMPLE_SIZE: Final = 20  # recent hold durations averaged for the ETA

# Await long poll (seconds)
DEFAULT_AWAIT_SECONDS: Final = 30.0
MIN_AWAIT_SECONDS: Final = 1.0
MAX_AWAIT_SECONDS: Final = 60.0
# A parked await is a waiter's keep-alive: the waiter timeout must outlast the longest await
# plus this margin (network, a client's retry), or a waiter is abandoned mid-poll.
WAITER_TIMEOUT_MARGIN_SECONDS: Final = 30.0
MIN_WAITER_TIMEOUT_SECONDS: Final = MAX_AWAIT_SECONDS + WAITER_TIMEOUT_MARGIN_SECONDS  # 90
MAX_WAITER_TIMEOUT_SECONDS: Final = 86400.0

# Cooldown (seconds)
MIN_COOLDOWN_SECONDS: Final = 30.0
MAX_COOLDOWN_SECONDS: Final = 7200.0
COOLDOWN_REASONS: Final = ("provider-human-check",)

# Render log and reads
DEFAULT_HISTORY_RETAINED: Final = 5000  # rows per lane
DEFAULT_HISTORY_LIMIT: Final = 100
MAX_HISTORY_LIMIT: Final = 5000
STATUS_QUEUED_LIMIT: Final = 200  # queued tickets listed by status; queuedTotal says how many
RECENT_RECEIPTS_LIMIT: Final = 50
INCIDENTS_RETAINED: Final = 2000  # rows per lane
DEFAULT_INCIDENTS_LIMIT: Final = 100
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
DEFAULT_MAX_BODY_BYTES: Final = 65536
MAX_RECEIPT_PAYLOAD_BYTES: Final = 32 * 1024
MAX_IDENTITY_CHARS: Final = 128
MAX_CLAIM_CHARS: Final = 128
MAX_PROVIDER_JOB_CHARS: Final = 256
MAX_NOTE_CHARS: Final = 500
MIN_TOKEN_BYTES: Final = 32

# Presence and evidence (seconds)
MACHINE_ONLINE_SECONDS: Final = 180.0
EVIDENCE_RECENT_SECONDS: Final = 3600.0

# Actor housekeeping (seconds)
LANE_IDLE_CLOSE_SECONDS: Final = 60.0
JANITOR_INTERVAL_SECONDS: Final = 15.0
SHUTDOWN_GRACE_SECONDS: Final = 10.0
STORE_BUSY_TIMEOUT_MS: Final = 5000
OPEN_ATTEMPTS: Final = 200  # opening a lane file another process is switching to WAL
OPEN_RETRY_SECONDS: Final = 0.025  # between those attempts (at most ~5 s in all)
STORE_THREADS: Final = 4
MAILBOX_BATCH_MAX: Final = 256  # commands group-committed in one transaction

# Server defaults
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8787
