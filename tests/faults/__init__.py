"""The fault campaign (issue 12): a real `lane-coordinator serve` under load while faults
hit it, judged afterwards by the recorded-history checker (tests/harness/history.py).

- test_crash.py: (a) kill -9 × N, (b) the server frozen longer than a lease, (c) a holding
  client frozen until its lease expires; test_ghosts.py: (b2) requests abandoned during a
  freeze; test_disk.py: (d) the data dir's tmpfs full under load, the cause in the log, startup
  on a full disk; test_resources.py: (e) ulimit -n 128, (f) idle and slowloris connections;
  test_corrupt.py: (g) corrupt lane files; test_hostile.py: (h) hostile bodies and headers;
  test_postgres.py: (i) PostgreSQL replica kill -9 and database restarts.
- load.py: the eight clients (the client loop is tests/harness/load.py); worker.py: a client
  in its own process (to SIGSTOP it); disk.py: the small disk; table.py: the rows;
  __main__.py: `make faults`.

FAULTS_FULL=1 for the full run (`make faults`), FAULTS_SEED=<n> to replay a run's choices.
"""
