#!/bin/sh
# Node.js and the pinned npm packages of the repository's two Node folders: the TypeScript
# client (clients/typescript: openapi-typescript, typescript, @types/node) and the OpenAPI
# judges (tools/openapi: Redocly CLI, ajv). Find node and npm, else install Debian's nodejs and
# npm when we are root (as ensure-postgres.sh does for PostgreSQL); then `npm ci` in each
# folder whose node_modules is missing or older than its package-lock.json.
# Needs Node.js 20.19+ or 22.12+ (what Redocly CLI 2.x declares; the client itself runs on
# 18.17+). Idempotent; prints one line.
set -eu
cd "$(dirname "$0")/.."
DIRS="clients/typescript tools/openapi"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "the TypeScript client and the OpenAPI tests need Node.js 20.19+ and npm:" \
      "run 'sudo apt-get install nodejs npm' (or 'sudo sh scripts/ensure-node.sh')" >&2
    exit 1
  fi
  echo "installing Debian's nodejs and npm..." >&2
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

for dir in $DIRS; do
  stamp=$dir/node_modules/.package-lock.json
  if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    echo "installing the pinned npm packages of $dir (npm ci)..." >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
done
echo "Node.js $version; npm packages in $(echo $DIRS | sed 's/ / and /')"
