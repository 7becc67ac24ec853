#!/bin/sh
# The power-loss tests (tests/powerloss) compile a small LD_PRELOAD shim: find a C compiler,
# else install Debian's gcc when we are root. Idempotent; prints nothing when one is there.
set -eu
for cc in cc gcc clang; do
  if command -v "$cc" >/dev/null 2>&1; then
    exit 0
  fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "the power-loss tests need a C compiler: run 'sudo apt-get install gcc'" \
    "(or 'sudo sh scripts/ensure-cc.sh')" >&2
  exit 1
fi
echo "installing gcc for the power-loss tests..." >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc libc6-dev >/dev/null ||
  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc libc6-dev >/dev/null; }
