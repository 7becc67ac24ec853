"""The peer table (`make bench-peers`, `python -m bench --peers`): our server beside what a
team would otherwise pick for a counting semaphore per lane, in ONE run, with the same load
generator and the same shapes (bench/peers/shapes.py):

- ours on SQLite; ours on PostgreSQL with one replica and with two (bench/peers/ours.py)
- a bare aiohttp server with an in-memory FIFO semaphore and no storage
  (bench/peers/fifo_server.py): the floor of HTTP + JSON + asyncio on this machine
- etcd, the client-side lock recipe over its JSON gRPC gateway (bench/peers/etcd_peer.py)
- Redis with `appendfsync always` and a Lua semaphore with a FIFO wait list and BLPOP
  wake-ups (bench/peers/redis_peer.py)
- the plain-PostgreSQL recipe: a holders-count row per lane, SELECT … FOR UPDATE,
  LISTEN/NOTIFY wake-ups (bench/peers/plain_pg.py)

Each system is started on loopback in the bench's temp dir and stopped at the end, on failure
and on Ctrl-C too; one that cannot be had prints "SKIPPED: reason". bench/peers/run.py runs
the rounds and bench/peers/table.py prints the table, the fairness notes and the targets
(issue 21) as PASS/MISS rows, each a ratio within the same run.
"""
