-- 0006_in_flight: in-flight provider jobs (docs/protocol.md#in-flight). Per ticket: the
-- createdAt of its latest provider-submitted receipt and of its provider-terminal receipt
-- (what the rule reads when the ticket ends), the holdUntil of the in-flight job it left, and
-- how that hold ended (null while it holds: the lane loads those rows). A file upgraded from
-- 0005 takes its live tickets' receipt times from the receipts it stores.
ALTER TABLE tickets ADD COLUMN submitted_at REAL;
ALTER TABLE tickets ADD COLUMN terminal_at REAL;
ALTER TABLE tickets ADD COLUMN in_flight_until REAL;
ALTER TABLE tickets ADD COLUMN in_flight_ended TEXT;
UPDATE tickets SET
  submitted_at = (SELECT max(r.created_at) FROM receipts r
                  WHERE r.ticket_id = tickets.ticket_id AND r.phase = 'provider-submitted'),
  terminal_at = (SELECT max(r.created_at) FROM receipts r
                 WHERE r.ticket_id = tickets.ticket_id AND r.phase = 'provider-terminal')
WHERE state IN ('queued', 'held');
CREATE INDEX tickets_in_flight ON tickets (in_flight_until)
  WHERE in_flight_until IS NOT NULL AND in_flight_ended IS NULL;
