#!/usr/bin/env bash
# `make drill`: the acceptance drill (docs/protocol.md#acceptance-drill) end to end on this
# computer.
#
# Starts a FRESH coordinator on loopback (port chosen by the OS, temp data dir,
# deploy/example-config.toml: route "drill" has capacity 1 and in-flight holds on, which step 7
# checks — a CONFIG whose drill route has in_flight_hold_seconds = 0 fails it), runs
# `lane drill --role a` and `lane drill --role b` as two separate processes with different
# LANE_MACHINE_IDs and claims, waits for both, checks that the drill lane and its barrier lane
# hold no live tickets, stops the server. Exit 0 only when both roles passed every step and
# cleaned up.
#
# Environment: BIN (venv bin dir, default .venv/bin), CONFIG (default
# deploy/example-config.toml), DRILL_LANE (default drill:acceptance), DRILL_TIMEOUT (seconds a
# role waits for the other, default 120), DRILL_DATA_DIR (use and keep this data dir instead of
# a temp one, e.g. to inspect the SQLite files afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/drill-common.sh
BIN=${BIN:-.venv/bin}
CONFIG=${CONFIG:-deploy/example-config.toml}
LANE=${DRILL_LANE:-drill:acceptance}
TIMEOUT=${DRILL_TIMEOUT:-120}

work=$(mktemp -d "${TMPDIR:-/tmp}/lane-drill.XXXXXX")
data=${DRILL_DATA_DIR:-$work/data}
server_pid=""
role_pids=()

cleanup() {
  local pid
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
  [ -z "$server_pid" ] || stop_pid "$server_pid"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$data"
umask 077
"$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$work/token"
token=$(cat "$work/token")

: >"$work/server.log" # before its start is awaited (not left to the job's redirection)
"$BIN/lane-coordinator" serve --host 127.0.0.1 --port 0 --data-dir "$data" \
  --config "$CONFIG" --token-file "$work/token" 2>"$work/server.log" &
server_pid=$!
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$work/server.log" | head -n 1)
  [ -n "$url" ] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "drill: the coordinator did not start; its log:" >&2
  tail -n 20 "$work/server.log" >&2
  exit 1
fi
echo "drill: fresh coordinator at $url (data $data, config $CONFIG); lane $LANE"

# Each role: its own machine id, claim and config dir; no LANE_ACCOUNT (the drill refuses the
# account real renders use), the token only in the environment (never on a command line).
run_role() { # role machine
  exec env -u LANE_ACCOUNT -u LANE_CLAIM -u LANE_STATE_DIR \
    LANE_COORDINATOR_URL="$url" LANE_TOKEN="$token" LANE_MACHINE_ID="$2" \
    LANE_CLAIM="$2-$(date +%s)-$RANDOM" LANE_REQUIRED=1 \
    LANE_CONFIG_DIR="$work/config-$1" PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring \
    PYTHONUNBUFFERED=1 \
    "$BIN/lane" drill --role "$1" --lane "$LANE" --timeout "$TIMEOUT" >"$work/$1.log" 2>&1
}
: >"$work/a.log"
: >"$work/b.log"
run_role a drill-computer-a &
pid_a=$!
role_pids+=("$pid_a")
run_role b drill-computer-b &
pid_b=$!
role_pids+=("$pid_b")

# Follow both logs, each line prefixed with its role, until both roles have exited.
follow_roles

# After the drill: no live ticket on the drill lane or its barrier lane.
no_live_tickets drill "$url"

if [ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] && [ "$after_ok" = 1 ]; then
  echo "drill: PASSED (role A exit 0, role B exit 0, no live tickets left)"
  exit 0
fi
echo "drill: FAILED (role A exit $rc_a, role B exit $rc_b, lanes clean: $after_ok)" >&2
echo "drill: coordinator log (last 20 lines):" >&2
tail -n 20 "$work/server.log" >&2
exit 1
