#!/bin/sh
# The browser tests drive Debian's /usr/bin/chromium; install it when missing and we are root.
set -eu
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests..." >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
echo "the browser tests need /usr/bin/chromium: run 'sudo apt-get install chromium'" >&2
exit 1
