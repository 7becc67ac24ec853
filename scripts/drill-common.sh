# Shared by drill.sh, drill-ha.sh and drill-netns.sh (sourced, not run).

# no_live_tickets TAG URL RUNNER...: print "TAG: after: LANE held N queued M" for the drill
# lane and its barrier lane, asking the coordinator at URL through RUNNER (a command prefix,
# e.g. `ip netns exec NS`; may be empty). Sets after_ok=1 only when both are empty.
no_live_tickets() {
  local tag=$1 url=$2 l out counts
  shift 2
  after_ok=1
  for l in "$LANE" "$LANE-barrier"; do
    if ! out=$("$@" env LANE_COORDINATOR_URL="$url" LANE_TOKEN="$token" \
      LANE_MACHINE_ID="$tag-check" LANE_CONFIG_DIR="$work/config-check" \
      PYTHON_KEYRING_BACKEND=keyring.backends.fail.Keyring \
      "$BIN/lane" status --lane "$l" --json 2>&1); then
      echo "$tag: status of $l failed: $out" >&2
      after_ok=0
      continue
    fi
    counts=$(printf '%s' "$out" | "$BIN/python" -c \
      'import json,sys; d=json.load(sys.stdin); print(len(d["held"]), len(d["queued"]))')
    echo "$tag: after: $l held ${counts% *} queued ${counts#* }"
    [ "$counts" = "0 0" ] || after_ok=0
  done
}

# show LABEL FILE SHOWN: print FILE's lines after the first SHOWN, each prefixed with LABEL,
# on stderr; echo the new count.
show() { # label file lines-shown -> prints the new lines, echoes the new count
  local n
  n=$(wc -l <"$2")
  if [ "$n" -gt "$3" ]; then
    sed -n "$(($3 + 1)),${n}p" "$2" | while IFS= read -r line; do printf '%s %s\n' "$1" "$line"; done >&2
  fi
  echo "$n"
}

# stop_pid PID: TERM, up to 10 s, then KILL (and reap it).
stop_pid() { # pid: TERM, up to 10 s, then KILL
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# follow_roles: while roles A and B ($pid_a, $pid_b) run, print their logs ($work/a.log,
# $work/b.log) prefixed [A]/[B]; then set rc_a and rc_b to their exit codes. Uses the
# globals shown_a, shown_b (the lines printed, for a cleanup that prints the rest) and
# role_pids (emptied once both have exited). `follow_roles HOOK` also runs HOOK (a function
# name) after each round of printing, e.g. to act on ACTION lines in the logs.
follow_roles() {
  local hook=${1:-}
  shown_a=0
  shown_b=0
  while kill -0 "$pid_a" 2>/dev/null || kill -0 "$pid_b" 2>/dev/null; do
    shown_a=$(show "[A]" "$work/a.log" "$shown_a")
    shown_b=$(show "[B]" "$work/b.log" "$shown_b")
    [ -z "$hook" ] || "$hook"
    sleep 0.2
  done
  rc_a=0
  wait "$pid_a" || rc_a=$?
  rc_b=0
  wait "$pid_b" || rc_b=$?
  role_pids=()
  show "[A]" "$work/a.log" "$shown_a" >/dev/null
  show "[B]" "$work/b.log" "$shown_b" >/dev/null
}
