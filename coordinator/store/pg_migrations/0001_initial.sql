-- 0001_initial: every lane in one database, `lane` in every key (coordinator/store/postgres.py).
-- Mirrors what one SQLite lane file holds (coordinator/store/migrations/0001..0003).
-- Never edit an applied migration; add a new numbered one.

-- One row per lane: the lane transaction's head (begin() locks it FOR UPDATE), the lane's
-- counters (SQLite: meta last_fence / next_seq) and the per-lane incident id counter.
CREATE TABLE lanes (
  lane          TEXT PRIMARY KEY,
  version       BIGINT NOT NULL DEFAULT 0 CHECK (version >= 0),
  next_deadline DOUBLE PRECISION,
  last_now      DOUBLE PRECISION,
  last_fence    BIGINT NOT NULL DEFAULT 0,
  next_seq      BIGINT NOT NULL DEFAULT 1,
  last_incident BIGINT NOT NULL DEFAULT 0,
  created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- the alarm poller: lanes whose earliest deadline has come
CREATE INDEX lanes_due ON lanes (next_deadline) WHERE next_deadline IS NOT NULL;

CREATE TABLE tickets (
  lane             TEXT NOT NULL REFERENCES lanes (lane) ON DELETE CASCADE,
  ticket_id        TEXT NOT NULL,
  seq              BIGINT NOT NULL,
  state            TEXT NOT NULL CHECK (state IN ('queued', 'held', 'done', 'expired')),
  machine_id       TEXT NOT NULL,
  claim_id         TEXT,
  project          TEXT NOT NULL,
  scene            TEXT NOT NULL,
  prompt_hash      TEXT NOT NULL,
  enqueued_at      DOUBLE PRECISION NOT NULL,
  lease_seconds    DOUBLE PRECISION NOT NULL CHECK (lease_seconds > 0),
  last_seen_at     DOUBLE PRECISION NOT NULL,
  held_at          DOUBLE PRECISION,
  lease_expires_at DOUBLE PRECISION,
  heartbeat_at     DOUBLE PRECISION,
  fence            BIGINT,
  outcome          TEXT CHECK (outcome IS NULL OR outcome IN (
                     'completed', 'failed', 'timeout', 'lease-lost', 'not-submitted',
                     'slot-busy', 'abandoned', 'expired')),
  late_outcome     TEXT,
  provider_job_id  TEXT,
  note             TEXT,
  ended_at         DOUBLE PRECISION,
  PRIMARY KEY (lane, ticket_id),
  UNIQUE (lane, seq),
  UNIQUE (lane, fence),
  CHECK (state <> 'held' OR lease_expires_at IS NOT NULL),
  CHECK ((state IN ('done', 'expired')) = (ended_at IS NOT NULL))
);
CREATE INDEX tickets_live ON tickets (lane, seq) WHERE state IN ('queued', 'held');
CREATE UNIQUE INDEX tickets_live_identity ON tickets (lane, project, scene, prompt_hash)
  WHERE state IN ('queued', 'held');
-- the render log (history): newest first, and the prune from the old end (backward scan)
CREATE INDEX tickets_log ON tickets (lane, ended_at DESC, seq DESC)
  WHERE state IN ('done', 'expired');
CREATE INDEX tickets_log_project ON tickets (lane, project, ended_at DESC, seq DESC)
  WHERE state IN ('done', 'expired');

CREATE TABLE projects (
  lane            TEXT NOT NULL REFERENCES lanes (lane) ON DELETE CASCADE,
  project         TEXT NOT NULL,
  last_fence      BIGINT NOT NULL,
  last_granted_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (lane, project)
);

CREATE TABLE pauses (
  lane        TEXT PRIMARY KEY REFERENCES lanes (lane) ON DELETE CASCADE,
  reason_code TEXT NOT NULL,
  started_at  DOUBLE PRECISION NOT NULL,
  until       DOUBLE PRECISION NOT NULL,
  machine_id  TEXT NOT NULL,
  claim_id    TEXT,
  ticket_id   TEXT NOT NULL
);

-- `id` only orders receipts stored in the same second (SQLite: rowid); gaps do not matter.
CREATE TABLE receipts (
  lane                  TEXT NOT NULL REFERENCES lanes (lane) ON DELETE CASCADE,
  receipt_id            TEXT NOT NULL,
  id                    BIGINT GENERATED ALWAYS AS IDENTITY,
  ticket_id             TEXT NOT NULL,
  phase                 TEXT NOT NULL CHECK (phase IN (
                          'lease-acquired', 'references-applied', 'provider-submitted',
                          'provider-terminal')),
  machine_id            TEXT NOT NULL,
  payload               TEXT NOT NULL,
  content_hash          TEXT NOT NULL,
  content_hash_verified BOOLEAN,
  created_at            DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (lane, receipt_id)
);
CREATE INDEX receipts_ticket ON receipts (lane, ticket_id, created_at, id);
CREATE INDEX receipts_created ON receipts (lane, created_at DESC, id DESC);

-- `id` is per lane, from lanes.last_incident (as SQLite's AUTOINCREMENT: dense, never reused)
CREATE TABLE incidents (
  lane       TEXT NOT NULL REFERENCES lanes (lane) ON DELETE CASCADE,
  id         BIGINT NOT NULL,
  kind       TEXT NOT NULL,
  at         DOUBLE PRECISION NOT NULL,
  ticket_id  TEXT,
  machine_id TEXT,
  detail     TEXT NOT NULL,
  PRIMARY KEY (lane, id)
);
CREATE INDEX incidents_kind ON incidents (lane, kind, id DESC);
