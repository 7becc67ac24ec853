#!/bin/sh
# The PostgreSQL tests start their own throwaway cluster (tests/harness/postgres.py runs
# initdb and pg_ctl itself): find the server binaries, else install Debian's postgresql when
# we are root. Debian's own service cluster is neither created nor started: the tests run
# their own (`pg_createcluster <version> main --start` makes Debian's if you want it).
# As root initdb must run as the `postgres` OS user: create that system user when missing.
# Prints the bin dir it found (one line); idempotent.
set -eu

# initdb on PATH (symlinks resolved: /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin),
# else the highest /usr/lib/postgresql/N/bin; the dir must hold initdb, pg_ctl and postgres
find_bin_dir() {
  candidates=""
  if p=$(command -v initdb 2>/dev/null); then
    candidates="$(dirname "$(readlink -f "$p")") $(dirname "$p")"
  fi
  candidates="$candidates $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5nr | tr '\n' ' ')"
  for d in $candidates; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

if ! bin_dir=$(find_bin_dir); then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "the PostgreSQL tests need the PostgreSQL server (initdb, pg_ctl, postgres on PATH or" \
      "in /usr/lib/postgresql/N/bin): run 'sudo apt-get install postgresql'" \
      "(or 'sudo sh scripts/ensure-postgres.sh')" >&2
    exit 1
  fi
  echo "installing Debian's postgresql for the PostgreSQL tests..." >&2
  # No main cluster during the install (so nothing to start): a drop-in that lives only as
  # long as the install; an existing Debian setup is left as it is.
  dropin=/etc/postgresql-common/createcluster.d/zz-lane-coordinator-no-main-cluster.conf
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = off" >"$dropin"
  trap 'rm -f "$dropin"' EXIT
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
    >/dev/null
  rm -f "$dropin"
  trap - EXIT
  if ! bin_dir=$(find_bin_dir); then
    echo "installed Debian's postgresql but found no initdb/pg_ctl/postgres" >&2
    exit 1
  fi
fi

# initdb refuses root: as root the harness runs it as `postgres` (Debian's package creates
# that user; an initdb from elsewhere may come without it)
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  echo "creating the system user postgres (initdb refuses to run as root)..." >&2
  useradd --system --no-create-home postgres
fi

echo "PostgreSQL for the tests: $bin_dir"
