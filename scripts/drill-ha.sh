#!/usr/bin/env bash
# `make drill-ha`: the acceptance drill across two replicas on one PostgreSQL database.
#
# The same drill as `make drill` (scripts/drill.sh), but the coordinator is two replicas:
# starts a throwaway PostgreSQL cluster in a temp dir (scripts/local_postgres.py: initdb,
# pg_ctl, a free loopback port, passwords in a pgpass file read through PGPASSFILE), runs
# `lane-coordinator migrate --store URL`, then two `lane-coordinator serve --store URL`
# replicas on loopback (ports chosen by the OS) with the same token file and the same config
# (deploy/example-config.toml: route "drill" has capacity 1 and in-flight holds on).
# `lane drill --role a` talks only to replica 1 and `lane drill --role b` only to replica 2, as
# two processes with different LANE_MACHINE_IDs and claims: the hand-off, B's parked await woken
# by A's release, the alarm, the receipts and step 7's in-flight hold (A's job keeps the slot
# on both replicas after its lease ran out; A's provider-terminal receipt through replica 1
# promotes B's waiter parked on replica 2) all cross from one replica to the other through the
# shared database.
# Afterwards the drill lane and its barrier lane must hold no live ticket, and both replicas
# must answer as `actor-postgres` with the same receipt trail. Exit 0 only when both roles
# passed every step and cleaned up.
#
# Teardown on success, failure and Ctrl-C alike: the roles (TERM: they release their
# tickets), the replicas, then PostgreSQL (fast shutdown), then the temp dir.
#
# Environment: BIN (venv bin dir, default .venv/bin), CONFIG (default
# deploy/example-config.toml), DRILL_LANE (default drill:acceptance), DRILL_TIMEOUT (seconds a
# role waits for the other, default 120). Needs the PostgreSQL server binaries
# (`sh scripts/ensure-postgres.sh`; `make drill-ha` runs it first).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/drill-common.sh
BIN=${BIN:-.venv/bin}
CONFIG=${CONFIG:-deploy/example-config.toml}
LANE=${DRILL_LANE:-drill:acceptance}
TIMEOUT=${DRILL_TIMEOUT:-120}

# No PG* variable from the caller's shell may redirect libpq (PGHOST, PGPASSWORD, PGSERVICE...):
# the store URL and the pgpass file below say everything.
for v in $(compgen -e); do
  case $v in PG*) unset "$v" ;; esac
done

others_can_traverse() { # DIR: every folder from DIR up to / lets other users through (o+x)
  local d
  d=$(cd "$1" 2>/dev/null && pwd -P) || return 1
  while :; do
    [ $((8#$(stat -c %a "$d") & 1)) = 1 ] || return 1
    [ "$d" = / ] && return 0
    d=$(dirname "$d")
  done
}

# As root the PostgreSQL server runs as the `postgres` OS user, which must reach the cluster:
# a temp dir it can pass through (TMPDIR when it can, else /tmp), opened for traversal only.
tmp_base=${TMPDIR:-/tmp}
if [ "$(id -u)" = 0 ] && ! others_can_traverse "$tmp_base"; then
  tmp_base=/tmp
fi
work=$(mktemp -d "$tmp_base/lane-drill-ha.XXXXXX")
if [ "$(id -u)" = 0 ]; then
  chmod 711 "$work"
fi
replica_pids=()
role_pids=()
shown_a=0
shown_b=0

cluster() { # start|stop: the throwaway cluster in $work/pg (scripts/local_postgres.py)
  # start prints "DSN PORT POSTMASTER_PID". SIGINT is ignored while it runs (the tools run in
  # their own session anyway): a Ctrl-C lets the step finish, then the trap tears down.
  "$BIN/python" - "$1" "$work" <<'PY'
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, "scripts")
from local_postgres import LocalPostgres, LocalPostgresError  # noqa: E402

signal.signal(signal.SIGINT, signal.SIG_IGN)
action, work = sys.argv[1], Path(sys.argv[2])
try:
    pg = LocalPostgres(work / "pg", work / "pgpass")
    if action == "start":
        dsn = pg.start()
        print(dsn, pg.port, pg.running_pid() or 0)
    else:
        pg.stop()
    sys.exit(0)
except LocalPostgresError as exc:
    print(f"drill: PostgreSQL: {exc}", file=sys.stderr)
    if action == "start" or "pg" not in globals():
        sys.exit(1)
pid = pg.running_pid()  # `pg_ctl stop` failed: an immediate shutdown, then SIGKILL
for sig in (signal.SIGQUIT, signal.SIGKILL):
    if pid is None:
        break
    os.kill(pid, sig)
    for _ in range(100):
        if pg.running_pid() is None:
            break
        time.sleep(0.1)
    pid = pg.running_pid()
sys.exit(1 if pid is not None else 0)
PY
}

cleanup() {
  local pid
  trap '' INT TERM # a second Ctrl-C does not cut the teardown short (every wait is bounded)
  for pid in "${role_pids[@]}"; do # TERM: a role releases its tickets before it exits
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${role_pids[@]}"; do
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ "${#role_pids[@]}" -gt 0 ] && [ -f "$work/a.log" ]; then # interrupted: the roles' last words
    show "[A]" "$work/a.log" "${shown_a:-0}" >/dev/null
    show "[B]" "$work/b.log" "${shown_b:-0}" >/dev/null
  fi
  for pid in "${replica_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${replica_pids[@]}"; do
    stop_pid "$pid"
  done
  if [ -d "$work/pg/data" ]; then
    cluster stop || echo "drill: PostgreSQL did not stop cleanly" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

umask 077
"$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$work/token"
token=$(cat "$work/token")

# 1. PostgreSQL, fresh, and the schema.
if ! started=$(cluster start); then
  echo "drill: PostgreSQL did not start (make drill-ha runs scripts/ensure-postgres.sh first)" >&2
  exit 1
fi
read -r dsn pg_port pg_pid <<<"$started"
if ! env -u LANE_COORDINATOR_TOKEN -u LANE_COORDINATOR_STORE PGPASSFILE="$work/pgpass" \
  "$BIN/lane-coordinator" migrate --store "$dsn" >"$work/migrate.log" 2>&1; then
  echo "drill: lane-coordinator migrate failed:" >&2
  tail -n 20 "$work/migrate.log" >&2
  exit 1
fi
echo "drill: fresh PostgreSQL on 127.0.0.1:$pg_port (pid $pg_pid, cluster $work/pg), migrated"

# 2. Two replicas on it: the same token file and config, their own loopback ports. Each in a
# session of its own (setsid), like PostgreSQL: a Ctrl-C reaches the roles, which release
# their tickets through the replicas, and only then does the teardown stop the replicas.
session=()
if command -v setsid >/dev/null 2>&1; then
  session=(setsid)
fi
for n in 1 2; do
  # made here, not by the background job's redirection, which may not have run yet when the
  # loop below first reads it (a loaded machine: `sed: can't read …` and a failed drill)
  : >"$work/replica-$n.log"
  "${session[@]}" env -u LANE_COORDINATOR_TOKEN -u LANE_COORDINATOR_STORE \
    PGPASSFILE="$work/pgpass" "$BIN/lane-coordinator" serve --store "$dsn" \
    --host 127.0.0.1 --port 0 --config "$CONFIG" --token-file "$work/token" \
    2>"$work/replica-$n.log" &
  replica_pids+=($!)
done
urls=()
for n in 1 2; do
  pid=${replica_pids[$((n - 1))]}
  url=""
  for _ in $(seq 1 600); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$work/replica-$n.log" | head -n 1)
    [ -n "$url" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if [ -z "$url" ]; then
    echo "drill: replica-$n did not start; its log:" >&2
    tail -n 20 "$work/replica-$n.log" >&2
    exit 1
  fi
  urls+=("$url")
  echo "drill: replica-$n at $url (pid $pid, store $dsn, config $CONFIG)"
done
url1=${urls[0]}
url2=${urls[1]}
echo "drill: lane $LANE; role A -> replica-1 $url1, role B -> replica-2 $url2"

# 3. The roles: each its own machine id, claim and config dir, and its own replica; no
# LANE_ACCOUNT (the drill refuses the account real renders use), the token only in the
# environment (never on a command line).
run_role() { # role machine url
  exec env -u LANE_ACCOUNT -u LANE_CLAIM -u LANE_STATE_DIR \
    LANE_COORDINATOR_URL="$3" LANE_TOKEN="$token" LANE_MACHINE_ID="$2" \
    LANE_CLAIM="$2-$(date +%s)-$RANDOM" LANE_REQUIRED=1 \
    LANE_CONFIG_DIR="$work/config-$1" PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring \
    PYTHONUNBUFFERED=1 \
    "$BIN/lane" drill --role "$1" --lane "$LANE" --timeout "$TIMEOUT" >"$work/$1.log" 2>&1
}
: >"$work/a.log"
: >"$work/b.log"
run_role a drill-computer-a "$url1" &
pid_a=$!
role_pids+=("$pid_a")
run_role b drill-computer-b "$url2" &
pid_b=$!
role_pids+=("$pid_b")

# Follow both logs, each line prefixed with its role, until both roles have exited.
follow_roles

# 4. After the drill: no live ticket on the drill lane or its barrier lane (read through
# replica 1), and both replicas tell the same story: actor-postgres, the same receipt trail.
no_live_tickets drill "$url1"
views=()
for n in 1 2; do
  u=${urls[$((n - 1))]}
  if ! out=$(env LANE_COORDINATOR_URL="$u" LANE_TOKEN="$token" LANE_MACHINE_ID="drill-check" \
    LANE_CONFIG_DIR="$work/config-check" PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring \
    "$BIN/lane" status --lane "$LANE" --verbose --json 2>&1); then
    echo "drill: status of $LANE through replica-$n failed: $out" >&2
    after_ok=0
    continue
  fi
  view=$(printf '%s' "$out" | "$BIN/python" -c 'import json, sys
d = json.load(sys.stdin)
print(d["coordinator"], len(d["held"]), len(d["queued"]), len(d.get("recentReceipts") or []))')
  read -r kind held queued receipts <<<"$view"
  echo "drill: replica-$n $u answers as $kind: $LANE held $held queued $queued, $receipts receipt(s)"
  views+=("$view")
  [ "$kind" = actor-postgres ] && [ "$held $queued" = "0 0" ] || after_ok=0
done
if [ "${#views[@]}" != 2 ] || [ "${views[0]}" != "${views[1]}" ]; then
  echo "drill: the replicas disagree about $LANE" >&2
  after_ok=0
fi

if [ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] && [ "$after_ok" = 1 ]; then
  echo "drill: PASSED (role A exit 0 via replica-1, role B exit 0 via replica-2, one" \
    "PostgreSQL, no live tickets left)"
  exit 0
fi
echo "drill: FAILED (role A exit $rc_a, role B exit $rc_b, lanes clean: $after_ok)" >&2
for n in 1 2; do
  echo "drill: replica-$n log (last 20 lines):" >&2
  tail -n 20 "$work/replica-$n.log" >&2
done
exit 1
