"""The lane engine: what every host (the server's lane actor, the client's local queue) runs.

- `lane`: LaneCore, a pure state machine (state + command + now -> reply + changes).
- `operations`: every lane operation written once (its store reads, then its pure part).
- `store`: the store protocol, built around a lane transaction (begin/load/apply/finish).
- `unenforced`: the replies of a lane with no limit. `model`, `commands`, `views`, `receipts`.

No I/O, no clock, no randomness: the host reads `now` once per operation (never behind the
lane's last `now`), mints ticket ids, performs the reads and persists the changes.
"""
