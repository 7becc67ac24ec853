#!/bin/sh
# The docs run (tests/docs) executes the docs' shell blocks, which use bash, curl and jq: find
# them, else install Debian's packages when we are root. Idempotent; prints nothing when found.
set -eu
missing=""
for tool in bash curl jq; do
  command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "the docs run (tests/docs) needs:$missing — run 'sudo apt-get install$missing'" \
    "(or 'sudo sh scripts/ensure-doc-tools.sh')" >&2
  exit 1
fi
echo "installing$missing for the docs run..." >&2
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null ||
  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null; }
