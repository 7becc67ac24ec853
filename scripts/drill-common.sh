# Shared by drill.sh and drill-netns.sh (sourced, not run).

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
