# lane-coordinator — every command a newcomer, CI and the team use.
VENV      ?= .venv
PY        := $(VENV)/bin/python
BIN       := $(VENV)/bin
HOST      ?= 127.0.0.1
PORT      ?= 8787
DATA_DIR  ?= var/data
CONFIG    ?= deploy/example-config.toml
# uv: the one on PATH, else the one `make setup` installs into the venv
UV         = $(shell command -v uv 2>/dev/null || echo $(BIN)/uv)

.PHONY: setup run run-ha test test-core test-ui lint openapi node-tools bench bench-peers verify dist ts-schema drill drill-ha drill-netns faults check clean

setup: $(VENV)/.installed

# coordinator/__init__.py holds __version__ (the one version source): a bump reinstalls
$(VENV)/.installed: pyproject.toml coordinator/__init__.py
	@# Never the system Python (Debian 12+/Ubuntu 24.04 refuse it): a venv from the standard
	@# venv module, uv inside it (or the uv already on PATH), then the project.
	@test -x $(PY) || python3 -m venv $(VENV)
	@if command -v uv >/dev/null 2>&1; then UV=uv; \
	  else test -x $(BIN)/uv || $(PY) -m pip install -q uv; UV=$(BIN)/uv; fi; \
	  VIRTUAL_ENV=$(VENV) $$UV pip install -q -e '.[dev]'
	@touch $@

## make run: a dev coordinator on loopback, generated token, example config, data in ./var/
run: setup
	@HOST=$(HOST) PORT=$(PORT) DATA_DIR=$(DATA_DIR) CONFIG=$(CONFIG) BIN=$(BIN) sh scripts/dev-run.sh

## make run-ha: high availability on loopback: a local PostgreSQL (kept in var/ha/pg), two
## replicas (`serve --store`, ports PORT+1 and PORT+2, or HA_REPLICA_PORTS=P1,P2), the same token
## (var/ha/token) and config, and a failover proxy on PORT; Ctrl-C stops them all
run-ha: setup
	@sh scripts/ensure-postgres.sh >/dev/null
	@$(PY) scripts/run_ha.py --host $(HOST) --port $(PORT) --config $(CONFIG) --dir var/ha \
	  $(if $(HA_REPLICA_PORTS),--replica-ports $(HA_REPLICA_PORTS))

## make test: unit + integration + acceptance, then the browser tests in their own run
test: test-core test-ui

test-core: setup node-tools
	@sh scripts/ensure-postgres.sh
	@sh scripts/ensure-cc.sh
	@sh scripts/ensure-doc-tools.sh
	$(BIN)/pytest -q tests/unit tests/contract tests/store_pg tests/replicas tests/integration tests/acceptance tests/ops tests/client tests/drill tests/driver tests/faults tests/powerloss tests/typescript tests/docs

test-ui: setup
	@sh scripts/ensure-chromium.sh
	$(BIN)/pytest -q -p no:asyncio tests/ui

lint: setup openapi
	$(BIN)/ruff check coordinator client tests bench scripts
	$(BIN)/ruff format --check coordinator client tests bench scripts
	$(BIN)/mypy
	$(BIN)/mypy --strict scripts/ha_proxy.py scripts/local_postgres.py scripts/run_ha.py

## make node-tools: Node.js (Debian's when missing) and the pinned npm packages of
## clients/typescript and tools/openapi
node-tools:
	@sh scripts/ensure-node.sh

## make openapi: the generated /openapi.json judged by other ecosystems' tools: Redocly CLI's
## recommended rules (0 errors, 0 warnings; tools/openapi/redocly.yaml) and ajv strict (every
## schema compiles, every example validates). tests/ops/test_openapi_tools.py does the same
## against a running server, and validates a whole drill's replies.
openapi: setup node-tools
	@mkdir -p var
	@$(PY) -m coordinator.http.openapi > var/openapi.json
	@REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true tools/openapi/node_modules/.bin/redocly \
	  lint --config tools/openapi/redocly.yaml --max-problems 50 var/openapi.json
	@node tools/openapi/check-document.mjs var/openapi.json >var/openapi-ajv.json || \
	  { cat var/openapi-ajv.json; exit 1; }
	@echo "openapi: Redocly lint clean, ajv strict compiled every schema and example"

## make bench: every shape of bench/ with its target and PASS/MISS, the peer table last
## (PostgreSQL, etcd and Redis installed when missing and root; a peer that cannot be had is
## SKIPPED); make bench-peers: the peer table alone (docs/performance.md)
bench: setup
	@sh scripts/ensure-postgres.sh >/dev/null || echo "bench: no PostgreSQL, its rows are SKIPPED" >&2
	@sh scripts/ensure-peers.sh >&2
	$(PY) -m bench

bench-peers: setup
	@sh scripts/ensure-postgres.sh >/dev/null || echo "bench: no PostgreSQL, its rows are SKIPPED" >&2
	@sh scripts/ensure-peers.sh >&2
	$(PY) -m bench --peers

## make verify: the one pre-merge command: ruff, ruff format, mypy --strict, every test,
## and a dry run (`lane-coordinator check`) of the shipped deploy/production-config.toml
verify: setup openapi
	$(BIN)/ruff check coordinator client tests bench scripts
	$(BIN)/ruff format --check coordinator client tests bench scripts
	$(BIN)/mypy
	$(BIN)/mypy --strict scripts/ha_proxy.py scripts/local_postgres.py scripts/run_ha.py
	$(MAKE) --no-print-directory test
	@LANE_COORDINATOR_TOKEN=$${LANE_COORDINATOR_TOKEN:-check-only-token-0123456789abcdefghijkl} \
	  $(BIN)/lane-coordinator check --data-dir var/verify-data --config deploy/production-config.toml
	@echo "verify: OK (ruff, ruff format, mypy --strict, the OpenAPI document's lint and ajv, every test, check of the production config)"

## make dist: the wheel and the sdist users install, and the TypeScript client's npm package
## (`npm pack`: lane-coordinator-client-<version>.tgz), in dist/ (tests/ops/test_dist.py builds
## the same wheel and installs it into a fresh venv; tests/typescript/test_typescript_package.py
## packs and installs the npm package)
dist: setup
	@test -x "$(UV)" || $(PY) -m pip install -q uv
	rm -rf dist
	$(UV) build --python $(PY) --out-dir dist
	@sh scripts/ensure-node.sh
	cd clients/typescript && npm pack --silent --pack-destination $(CURDIR)/dist >/dev/null
	@ls -1 dist

## make ts-schema: regenerate the TypeScript client's types (clients/typescript/src/schema.ts)
## from this checkout's OpenAPI document, the one GET /openapi.json serves (tests/typescript
## fails while the checked-in file differs from the live document's)
ts-schema: setup
	@sh scripts/ensure-node.sh
	@mkdir -p var
	@$(PY) -m coordinator.http.openapi > var/openapi-ts.json
	cd clients/typescript && npm run --silent generate -- $(CURDIR)/var/openapi-ts.json

## make drill: the acceptance drill (docs/protocol.md#acceptance-drill): a fresh loopback
## coordinator, roles A and B as two processes (tests/drill runs the same script in `make test`)
drill: setup
	@BIN=$(BIN) CONFIG=$(CONFIG) bash scripts/drill.sh

## make drill-ha: the same drill across two replicas on one fresh PostgreSQL (a throwaway
## cluster in a temp dir, migrate, two `serve --store` replicas): role A talks to replica 1,
## role B to replica 2; replicas, cluster and temp dir go on pass, failure and Ctrl-C
drill-ha: setup
	@sh scripts/ensure-postgres.sh >/dev/null
	@BIN=$(BIN) CONFIG=$(CONFIG) bash scripts/drill-ha.sh

## make drill-netns (root, Linux): the drill over veth links in three network namespaces,
## plus step 8 (B's link cut mid-lease); prints "SKIPPED: reason" where netns is not allowed
drill-netns: setup
	@BIN=$(BIN) CONFIG=$(CONFIG) bash scripts/drill-netns.sh

## make faults (root, Linux): the fault campaign under load, judged by the recorded-history
## checker, full length (a few minutes): kill -9 of the server, SIGSTOP of the server and of a
## holder, the data dir on a full tmpfs, ulimit -n 128, idle and slowloris connections, corrupt
## lane files, hostile input, PostgreSQL replica kill -9, a replica frozen mid-transaction and
## database restarts; it ends with
## one markdown row per fault. `make test` runs the same tests shortened (FAULTS_FULL unset).
faults: setup
	@sh scripts/ensure-postgres.sh >/dev/null
	@FAULTS_FULL=1 $(PY) -m tests.faults

check: setup
	@LANE_COORDINATOR_TOKEN=$${LANE_COORDINATOR_TOKEN:-check-only-token-0123456789abcdefghijkl} \
	  $(BIN)/lane-coordinator check --data-dir $(DATA_DIR) --config $(CONFIG)

clean:
	rm -rf var dist build .pytest_cache .mypy_cache .ruff_cache
