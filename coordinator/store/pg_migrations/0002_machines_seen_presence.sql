-- 0002_machines_seen_presence: what used to live in a server's memory, so every replica
-- tells the same story and a restart forgets nothing. Never edit an applied migration.

-- The evidence's machines seen, per lane (SQLite: migration 0004 of each lane file). A row is
-- written in the lane's transaction when the machine is first seen or its stored time is
-- old (not on every call); rows older than an hour are deleted when rows are written.
CREATE TABLE machines_seen (
  lane         TEXT NOT NULL REFERENCES lanes (lane) ON DELETE CASCADE,
  machine_id   TEXT NOT NULL,
  last_seen_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (lane, machine_id)
);
CREATE INDEX machines_seen_at ON machines_seen (lane, last_seen_at);

-- Machine presence (GET /v1/machines): one row per machine and lane it named ('' when a call
-- named none), written through by every replica at most every 30 s per row; rows older than
-- an hour are deleted when rows are written. `lane` need not be a row of `lanes` (an
-- unenforced lane has none).
CREATE TABLE presence (
  lane         TEXT NOT NULL,
  machine_id   TEXT NOT NULL,
  last_seen_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (machine_id, lane)
);
CREATE INDEX presence_seen ON presence (last_seen_at);
