-- 0004_eta_first: the ETA a ticket was first given (docs/protocol.md#eta-error); the same
-- column as a lane file's migration 0007: the etaSeconds the acquire that created the ticket
-- answered, 0 when it was granted at once. A lane loads its last 100 grants' errors by
-- fence (the (lane, fence) unique index). Tickets of a database upgraded from 0003 keep null
-- and count in no error. Never edit an applied migration; add a new numbered one.
ALTER TABLE tickets ADD COLUMN eta_first_seconds DOUBLE PRECISION;
