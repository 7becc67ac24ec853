-- 0007_eta_first: the ETA a ticket was first given (docs/protocol.md#eta-error): the
-- etaSeconds the acquire that created it answered, 0 when it was granted at once. A grant's
-- ETA error is |eta_first_seconds − (held_at − enqueued_at)|; the lane loads its last 100
-- grants' errors by fence. Tickets of a file upgraded from 0006 were given no recorded ETA:
-- they keep null and count in no error. Never edit an applied migration; add a new one.
ALTER TABLE tickets ADD COLUMN eta_first_seconds REAL;
