-- 0005_ticket_indexes: fewer indexes written with each ticket write (every index a write
-- touches is one more page in the commit's WAL frames). `seq` becomes the table's rowid
-- (INTEGER PRIMARY KEY: still unique, without an index of its own); `tickets_live` goes: the
-- live tickets are read through `tickets_live_identity`, which has the same WHERE. Every
-- constraint stays (ticket_id and fence unique, one live ticket per identity); the history
-- indexes are unchanged. The table is rebuilt with its rows and its column order.
CREATE TABLE tickets_0005 (
  ticket_id        TEXT NOT NULL UNIQUE,
  seq              INTEGER PRIMARY KEY,
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
INSERT INTO tickets_0005 (ticket_id, seq, state, machine_id, claim_id, project, scene,
  prompt_hash, enqueued_at, lease_seconds, last_seen_at, held_at, lease_expires_at,
  heartbeat_at, fence, outcome, late_outcome, provider_job_id, note, ended_at)
SELECT ticket_id, seq, state, machine_id, claim_id, project, scene, prompt_hash, enqueued_at,
  lease_seconds, last_seen_at, held_at, lease_expires_at, heartbeat_at, fence, outcome,
  late_outcome, provider_job_id, note, ended_at
FROM tickets ORDER BY seq;
DROP TABLE tickets;
ALTER TABLE tickets_0005 RENAME TO tickets;
CREATE UNIQUE INDEX tickets_live_identity ON tickets (project, scene, prompt_hash)
  WHERE state IN ('queued', 'held');
CREATE INDEX tickets_log ON tickets (ended_at DESC, seq DESC) WHERE state IN ('done', 'expired');
CREATE INDEX tickets_log_project ON tickets (project, ended_at DESC, seq DESC)
  WHERE state IN ('done', 'expired');
