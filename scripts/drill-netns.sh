#!/usr/bin/env bash
# `make drill-netns` (root, Linux): the acceptance drill over real network links, plus step 8.
#
# Three network namespaces joined by veth pairs, one private /24 per link:
#
#   A (10.231.1.2) ──── 10.231.1.0/24 ──── (10.231.1.1) coordinator (10.231.2.1) ──── 10.231.2.0/24 ──── (10.231.2.2) B
#
# The coordinator listens on 0.0.0.0 INSIDE its namespace only (both of its veth addresses);
# A and B reach it over their own link. `lane drill --partition` runs the seven steps of
# docs/protocol.md#acceptance-drill and an eighth: B holds a 15 s lease, B's link is cut
# (`ip link set ... down` when B prints `ACTION: cut-link-b`), the lease expires and the alarm
# promotes A; B's link returns (when A prints `ACTION: restore-link-b`), B reads
# `refreshed: false` three times, parks as lease-lost, and its late release leaves outcome
# expired + lateOutcome lease-lost.
#
# Namespaces, links and processes are removed on any exit (trap). When network namespaces
# cannot be made here (not root, no CAP_SYS_ADMIN, no iproute2) it prints
# "SKIPPED: <reason>" and exits 0 — only then.
#
# Environment: BIN (default .venv/bin), CONFIG (default deploy/example-config.toml),
# DRILL_LANE (default drill:acceptance), DRILL_TIMEOUT (default 120).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/drill-common.sh
BIN=$(cd "${BIN:-.venv/bin}" && pwd)
CONFIG=${CONFIG:-deploy/example-config.toml}
LANE=${DRILL_LANE:-drill:acceptance}
TIMEOUT=${DRILL_TIMEOUT:-120}

skip() {
  echo "SKIPPED: $*"
  exit 0
}

# ---- capability check (the only way to exit 0 without running the drill)
command -v ip >/dev/null 2>&1 || skip "\`ip\` (iproute2) is not installed (apt-get install -y iproute2)"
tag="ld$$"
probe="lane-drill-probe-$$"
if ! err=$(ip netns add "$probe" 2>&1); then
  skip "\`ip netns add\` is not permitted here: ${err:-unknown error} (needs root / CAP_SYS_ADMIN)"
fi
if ! err=$(ip -n "$probe" link add p0 type veth peer name p1 2>&1); then
  ip netns del "$probe" 2>/dev/null || true
  skip "veth pairs cannot be created here: ${err:-unknown error}"
fi
if ! err=$(ip netns exec "$probe" true 2>&1); then
  ip netns del "$probe" 2>/dev/null || true
  skip "\`ip netns exec\` is not permitted here: ${err:-unknown error}"
fi
ip netns del "$probe"

NSC="$tag-coord"
NSA="$tag-a"
NSB="$tag-b"
work=$(mktemp -d "${TMPDIR:-/tmp}/lane-drill-netns.XXXXXX")
role_pids=()
server_pid=""

cleanup() {
  local pid ns
  # Roles first (TERM: a role releases its tickets while the coordinator still runs).
  for pid in "${role_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${role_pids[@]}"; do
    stop_pid "$pid"
  done
  if [ -f "$work/a.log" ] && [ "${finished:-0}" = 0 ]; then # interrupted: the roles' last words
    show "[A]" "$work/a.log" "${shown_a:-0}" >/dev/null
    show "[B]" "$work/b.log" "${shown_b:-0}" >/dev/null
  fi
  [ -z "$server_pid" ] || stop_pid "$server_pid"
  for ns in "$NSA" "$NSB" "$NSC"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "netns: $*"; }

# ---- namespaces and links
say "namespaces $NSC $NSA $NSB"
for ns in "$NSC" "$NSA" "$NSB"; do
  ip netns add "$ns"
  ip -n "$ns" link set lo up
done
ip link add c2a netns "$NSC" type veth peer name a2c netns "$NSA"
ip link add c2b netns "$NSC" type veth peer name b2c netns "$NSB"
ip -n "$NSC" addr add 10.231.1.1/24 dev c2a
ip -n "$NSA" addr add 10.231.1.2/24 dev a2c
ip -n "$NSC" addr add 10.231.2.1/24 dev c2b
ip -n "$NSB" addr add 10.231.2.2/24 dev b2c
for pair in "$NSC c2a" "$NSC c2b" "$NSA a2c" "$NSB b2c"; do
  set -- $pair
  ip -n "$1" link set "$2" up
done
say "namespaces $NSC (10.231.1.1, 10.231.2.1), $NSA (10.231.1.2), $NSB (10.231.2.2)"

# ---- the coordinator, inside its namespace only
umask 077
"$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$work/token"
token=$(cat "$work/token")
mkdir -p "$work/data"
: >"$work/server.log" # before its start is awaited (not left to the job's redirection)
ip netns exec "$NSC" "$BIN/lane-coordinator" serve --host 0.0.0.0 --port 0 \
  --data-dir "$work/data" --config "$CONFIG" --token-file "$work/token" 2>"$work/server.log" &
server_pid=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on http:\/\/0\.0\.0\.0:\([0-9]*\).*/\1/p' "$work/server.log" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "netns: the coordinator did not start; its log:" >&2
  tail -n 20 "$work/server.log" >&2
  exit 1
fi
url_a="http://10.231.1.1:$port"
url_b="http://10.231.2.1:$port"

health() { # namespace url
  ip netns exec "$1" "$BIN/python" -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=10).read().decode())' "$2"
}
health "$NSA" "$url_a" >/dev/null && health "$NSB" "$url_b" >/dev/null
say "coordinator listening on 0.0.0.0:$port in $NSC; A uses $url_a, B uses $url_b"

# ---- the two roles, each in its own namespace
run_role() { # role machine namespace url
  exec ip netns exec "$3" env -u LANE_ACCOUNT -u LANE_CLAIM -u LANE_STATE_DIR \
    LANE_COORDINATOR_URL="$4" LANE_TOKEN="$token" LANE_MACHINE_ID="$2" \
    LANE_CLAIM="$2-$(date +%s)-$RANDOM" LANE_REQUIRED=1 LANE_CONFIG_DIR="$work/config-$1" \
    PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring PYTHONUNBUFFERED=1 \
    "$BIN/lane" drill --role "$1" --lane "$LANE" --timeout "$TIMEOUT" --partition \
    >"$work/$1.log" 2>&1
}
: >"$work/a.log"
: >"$work/b.log"
run_role a netns-computer-a "$NSA" "$url_a" &
pid_a=$!
role_pids+=("$pid_a")
run_role b netns-computer-b "$NSB" "$url_b" &
pid_b=$!
role_pids+=("$pid_b")

# Follow both logs (prefixed) while acting on the ACTION lines.
cut=0
restored=0
act_on_link() {
  if [ "$cut" = 0 ] && grep -q 'ACTION: cut-link-b' "$work/b.log"; then
    ip -n "$NSC" link set c2b down
    cut=1
    say "B's link cut: ip -n $NSC link set c2b down" >&2
  fi
  if [ "$cut" = 1 ] && [ "$restored" = 0 ] && grep -q 'ACTION: restore-link-b' "$work/a.log"; then
    ip -n "$NSC" link set c2b up
    restored=1
    say "B's link restored: ip -n $NSC link set c2b up" >&2
  fi
}
follow_roles act_on_link
finished=1
if [ "$cut" = 1 ] && [ "$restored" = 0 ]; then
  ip -n "$NSC" link set c2b up
fi

# ---- after the drill: no live ticket on the drill lane or its barrier lane
no_live_tickets netns "$url_a" ip netns exec "$NSA"

# Summary on stdout: both roles' PASS lines (the live logs above went to stderr).
echo "netns: summary"
grep -h '^PASS  step' "$work/a.log" | sed 's/^/[A] /'
grep -h '^PASS  step' "$work/b.log" | sed 's/^/[B] /'
if [ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] && [ "$after_ok" = 1 ] && [ "$cut" = 1 ] && [ "$restored" = 1 ]; then
  say "PASSED: eight steps over veth links (role A exit 0, role B exit 0, link cut and restored, no live tickets left)"
  exit 0
fi
say "FAILED (role A exit $rc_a, role B exit $rc_b, link cut $cut restored $restored, lanes clean $after_ok)" >&2
tail -n 20 "$work/server.log" >&2
exit 1
