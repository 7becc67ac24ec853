"""The lane core: a pure state machine (state + command + now -> reply + changes).

No I/O, no clock, no randomness: the actor (or the local queue) reads `now` once per
operation, mints ticket ids, and persists the changes this package returns.
"""
