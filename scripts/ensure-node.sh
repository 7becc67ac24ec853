#!/bin/sh
# The TypeScript client (clients/typescript) builds and tests with Node.js and npm: find them,
# else install Debian's nodejs and npm when we are root (as ensure-postgres.sh does for
# PostgreSQL); then `npm ci` in clients/typescript when its node_modules is missing or older
# than package-lock.json (the pinned openapi-typescript, typescript and @types/node).
# The client needs Node.js 18.17+ (Debian 12's nodejs is 18.20). Idempotent; prints one line.
set -eu
cd "$(dirname "$0")/.."
PKG=clients/typescript

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "the TypeScript client needs Node.js 18.17+ and npm: run 'sudo apt-get install nodejs npm'" \
      "(or 'sudo sh scripts/ensure-node.sh')" >&2
    exit 1
  fi
  echo "installing Debian's nodejs and npm for the TypeScript client..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm \
    >/dev/null
fi

version=$(node -p 'process.versions.node')
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" -lt 18 ] || { [ "$major" -eq 18 ] && [ "$minor" -lt 17 ]; }; then
  echo "the TypeScript client needs Node.js 18.17+; this is $version" >&2
  exit 1
fi

stamp=$PKG/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ "$PKG/package-lock.json" -nt "$stamp" ]; then
  echo "installing the TypeScript client's pinned dependencies (npm ci in $PKG)..." >&2
  (cd "$PKG" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "TypeScript client: node $version, $PKG/node_modules"
