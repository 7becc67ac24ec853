#!/bin/sh
# The OpenAPI tests judge /openapi.json with tools from the npm registry (tools/openapi:
# Redocly CLI and ajv, pinned in package.json + package-lock.json). Find node and npm, else
# install Debian's nodejs and npm when we are root (as ensure-postgres.sh does for PostgreSQL);
# then `npm ci` in tools/openapi when its node_modules is missing or older than the lock file.
# Redocly CLI 2.x needs Node.js 20.19+ (or 22.12+). Idempotent; prints one line.
set -eu
cd "$(dirname "$0")/.."
TOOLS=tools/openapi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "the OpenAPI tests need Node.js 20.19+ and npm: run 'sudo apt-get install nodejs npm'" \
      "(or 'sudo sh scripts/ensure-node-tools.sh')" >&2
    exit 1
  fi
  echo "installing Debian's nodejs and npm for the OpenAPI tests..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm \
    >/dev/null
fi

# node's major.minor against what Redocly CLI 2.x declares: >=20.19 <21, or >=22.12
version=$(node -p 'process.versions.node')
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" -lt 20 ] || { [ "$major" -eq 20 ] && [ "$minor" -lt 19 ]; } ||
  { [ "$major" -eq 21 ]; } || { [ "$major" -eq 22 ] && [ "$minor" -lt 12 ]; }; then
  echo "the OpenAPI tests need Node.js 20.19+ or 22.12+ (Redocly CLI 2.x); this is $version" >&2
  exit 1
fi

stamp=$TOOLS/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ "$TOOLS/package-lock.json" -nt "$stamp" ]; then
  echo "installing the OpenAPI tools (npm ci in $TOOLS)..." >&2
  (cd "$TOOLS" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "OpenAPI tools: node $version, $TOOLS/node_modules"
