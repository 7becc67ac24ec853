#!/bin/sh
# The peer table of `make bench-peers` (bench/peers) starts etcd and Redis of its own, each on
# loopback in a temp dir: find their server binaries, else install Debian's etcd-server and
# redis-server when we are root. Debian's own services are not started by the install (a
# policy-rc.d that refuses them lives only as long as the install, and only where none was
# there); the bench runs its own. A peer that cannot be installed prints
# "SKIPPED: <peer>: reason" and the script goes on: the bench prints that peer's row as
# SKIPPED. Prints one line per peer; always exits 0. PostgreSQL: scripts/ensure-postgres.sh.
set -u

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ]; }

missing=""
have etcd || missing="$missing etcd-server"
have redis-server || missing="$missing redis-server"

if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    for pkg in $missing; do
      echo "SKIPPED: $pkg: not installed and not root with apt-get" \
        "(run 'sudo apt-get install $pkg' or 'sudo sh scripts/ensure-peers.sh')"
    done
  else
    echo "installing Debian's$missing for the bench's peer table..." >&2
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
      trap 'rm -f "$policy"' EXIT
    fi
    for pkg in $missing; do
      # one package at a time: one that cannot be had does not keep the other out
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" \
        >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" \
            >/dev/null 2>&1; } ||
        echo "SKIPPED: $pkg: apt-get install $pkg failed"
    done
    if [ "$made_policy" = 1 ]; then
      rm -f "$policy"
      trap - EXIT
    fi
  fi
fi

if have etcd; then echo "etcd for the bench: $(command -v etcd || echo /usr/bin/etcd)"; fi
if have redis-server; then
  echo "redis-server for the bench: $(command -v redis-server || echo /usr/bin/redis-server)"
fi
exit 0
