-- 0003_in_flight: in-flight provider jobs (docs/protocol.md#in-flight); the same columns as a
-- lane file's migration 0006. Per ticket: the createdAt of its latest provider-submitted
-- receipt and of its provider-terminal receipt, the holdUntil of the in-flight job it left,
-- and how that hold ended (null while it holds: a lane loads those rows). Live tickets of a
-- database upgraded from 0002 take their receipt times from the stored receipts.
-- Never edit an applied migration; add a new numbered one.
ALTER TABLE tickets
  ADD COLUMN submitted_at DOUBLE PRECISION,
  ADD COLUMN terminal_at DOUBLE PRECISION,
  ADD COLUMN in_flight_until DOUBLE PRECISION,
  ADD COLUMN in_flight_ended TEXT;
UPDATE tickets t SET
  submitted_at = (SELECT max(r.created_at) FROM receipts r WHERE r.lane = t.lane
                  AND r.ticket_id = t.ticket_id AND r.phase = 'provider-submitted'),
  terminal_at = (SELECT max(r.created_at) FROM receipts r WHERE r.lane = t.lane
                 AND r.ticket_id = t.ticket_id AND r.phase = 'provider-terminal')
WHERE t.state IN ('queued', 'held');
CREATE INDEX tickets_in_flight ON tickets (lane, in_flight_until)
  WHERE in_flight_until IS NOT NULL AND in_flight_ended IS NULL;
