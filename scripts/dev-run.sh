#!/bin/sh
# `make run`: start a dev coordinator on loopback with a generated token (kept in var/, 0600).
set -eu
umask 077 # before anything is created: var/, the data dir and the token are owner-only
mkdir -p var "$DATA_DIR"
chmod 700 var
if [ ! -s var/dev-token ]; then
  "$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))' > var/dev-token
fi
chmod 600 var/dev-token # a token file left by an older script may be 0644
TOKEN=$(cat var/dev-token)
cat <<MSG
lane-coordinator (dev) on http://$HOST:$PORT
  control room : http://$HOST:$PORT/control-room   (paste the token into "Unlock ledger")
  token        : $TOKEN   (stored in var/dev-token)
  data         : $DATA_DIR   config: $CONFIG
  try          : curl -s -X POST http://$HOST:$PORT/v1/lanes/status \\
                   -H "Authorization: Bearer \$(cat var/dev-token)" -H 'Content-Type: application/json' \\
                   -d '{"protocolVersion":1,"lane":"seedance-direct:main-unlimited"}'
MSG
exec "$BIN/lane-coordinator" serve --host "$HOST" --port "$PORT" --data-dir "$DATA_DIR" \
  --config "$CONFIG" --token-file var/dev-token
