-- 0003_lane_head: the lane transaction's head (coordinator/engine/store.py), one row.
-- version: every finished transaction adds 1 (a writer whose cached version differs reloads);
-- next_deadline: the lane's earliest lease expiry, waiter deadline or pause end after it;
-- last_now: the latest `now` the lane ran at (a lane's clock never runs back).
-- A file upgraded from 0002 starts at version 0 with no deadline and no last_now yet.
CREATE TABLE lane_head (
  id            INTEGER PRIMARY KEY CHECK (id = 1),
  version       INTEGER NOT NULL CHECK (version >= 0),
  next_deadline REAL,
  last_now      REAL
);
INSERT INTO lane_head (id, version) VALUES (1, 0);
