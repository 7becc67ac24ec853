-- 0004_machines_seen: the machines seen on this lane (its evidence), one row per machine, so
-- the lane's close or a restart forgets none seen in the last hour. A row is written when the
-- machine is first seen or its stored time is old (not on every call); rows older than an
-- hour are deleted when rows are written.
CREATE TABLE machines_seen (
  machine_id   TEXT PRIMARY KEY,
  last_seen_at REAL NOT NULL
);
CREATE INDEX machines_seen_at ON machines_seen (last_seen_at);
