#!/bin/sh
# `make run`: start a dev coordinator on loopback with generated credentials (kept in var/,
# 0600): an admin token (var/dev-token: what curl and `lane` use) and a reader token for the
# control room (var/dev-read-token); the server's token file (var/dev-credentials) holds only
# their hashes (docs/operator.md#credentials).
set -eu
umask 077 # before anything is created: var/, the data dir and the tokens are owner-only
mkdir -p var "$DATA_DIR"
chmod 700 var
for f in var/dev-token var/dev-read-token; do
  if [ ! -s "$f" ]; then
    "$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$f"
  fi
  chmod 600 "$f" # a token file left by an older script may be 0644
done
"$BIN/python" - var/dev-token var/dev-read-token > var/dev-credentials <<'PY'
import hashlib
import sys

for path, name, role in ((sys.argv[1], "dev", "admin"), (sys.argv[2], "dev-control-room", "reader")):
    with open(path, encoding="utf-8") as f:
        token = f.read().strip()
    print(f"sha256:{hashlib.sha256(token.encode()).hexdigest()} name={name} role={role}")
PY
chmod 600 var/dev-credentials
TOKEN=$(cat var/dev-token)
READ_TOKEN=$(cat var/dev-read-token)
cat <<MSG
lane-coordinator (dev) on http://$HOST:$PORT
  control room : http://$HOST:$PORT/control-room   (paste the reader token into "Unlock ledger")
  reader token : $READ_TOKEN   (var/dev-read-token: reads everything, writes nothing)
  admin token  : $TOKEN   (var/dev-token: curl, lane)
  data         : $DATA_DIR   config: $CONFIG
  try          : curl -s -X POST http://$HOST:$PORT/v1/lanes/status \\
                   -H "Authorization: Bearer \$(cat var/dev-token)" -H 'Content-Type: application/json' \\
                   -d '{"protocolVersion":1,"lane":"seedance-direct:main-unlimited"}'
MSG
exec "$BIN/lane-coordinator" serve --host "$HOST" --port "$PORT" --data-dir "$DATA_DIR" \
  --config "$CONFIG" --token-file var/dev-credentials
