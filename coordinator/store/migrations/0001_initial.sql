-- 0001_initial: one lane per file. Never edit an applied migration; add a new one.
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE tickets (
  ticket_id        TEXT PRIMARY KEY,
  seq              INTEGER NOT NULL UNIQUE,
  state            TEXT NOT NULL CHECK (state IN ('queued', 'held', 'done', 'expired')),
  machine_id       TEXT NOT NULL,
  claim_id         TEXT,
  project          TEXT NOT NULL,
  scene            TEXT NOT NULL,
  prompt_hash      TEXT NOT NULL,
  enqueued_at      REAL NOT NULL,
  lease_seconds    REAL NOT NULL CHECK (lease_seconds > 0),
  last_seen_at     REAL NOT NULL,
  held_at          REAL,
  lease_expires_at REAL,
  heartbeat_at     REAL,
  fence            INTEGER UNIQUE,
  outcome          TEXT CHECK (outcome IS NULL OR outcome IN (
                     'completed', 'failed', 'timeout', 'lease-lost', 'not-submitted',
                     'slot-busy', 'abandoned', 'expired')),
  late_outcome     TEXT,
  provider_job_id  TEXT,
  note             TEXT,
  ended_at         REAL,
  CHECK ((state = 'held') <= (lease_expires_at IS NOT NULL)),
  CHECK ((state IN ('done', 'expired')) = (ended_at IS NOT NULL))
);
CREATE INDEX tickets_live ON tickets (state) WHERE state IN ('queued', 'held');
CREATE UNIQUE INDEX tickets_live_identity ON tickets (project, scene, prompt_hash)
  WHERE state IN ('queued', 'held');
CREATE INDEX tickets_log ON tickets (ended_at DESC, seq DESC) WHERE state IN ('done', 'expired');
CREATE INDEX tickets_log_project ON tickets (project, ended_at DESC, seq DESC)
  WHERE state IN ('done', 'expired');

CREATE TABLE projects (
  project         TEXT PRIMARY KEY,
  last_fence      INTEGER NOT NULL,
  last_granted_at REAL NOT NULL
);

CREATE TABLE pause (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  reason_code TEXT NOT NULL,
  started_at  REAL NOT NULL,
  until       REAL NOT NULL,
  machine_id  TEXT NOT NULL,
  claim_id    TEXT,
  ticket_id   TEXT NOT NULL
);

CREATE TABLE receipts (
  receipt_id   TEXT PRIMARY KEY,
  ticket_id    TEXT NOT NULL,
  phase        TEXT NOT NULL CHECK (phase IN (
                 'lease-acquired', 'references-applied', 'provider-submitted',
                 'provider-terminal')),
  machine_id   TEXT NOT NULL,
  payload      TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  created_at   REAL NOT NULL
);
CREATE INDEX receipts_ticket ON receipts (ticket_id);
CREATE INDEX receipts_created ON receipts (created_at DESC);

CREATE TABLE incidents (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  kind       TEXT NOT NULL,
  at         REAL NOT NULL,
  ticket_id  TEXT,
  machine_id TEXT,
  detail     TEXT NOT NULL
);
CREATE INDEX incidents_kind ON incidents (kind, id DESC);
