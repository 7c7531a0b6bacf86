# agentmesh: `make run` starts the suite, `make test` passes the tests. Both install what
# they need into .venv (Python) and tools/node/node_modules (buf, @ag-ui/client) first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := tools/node/node_modules/.installed
export PYTHONPATH := $(CURDIR):$(CURDIR)/protos

.PHONY: install tools run test test-embedded test-postgres protos protos-check lint buf-lint buf-breaking bench token clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

tools: $(NODE_STAMP)

$(NODE_STAMP): tools/node/package.json tools/node/package-lock.json
	cd tools/node && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## Start every service on localhost (SQLite, in-memory event log, scripted model); Ctrl-C stops all.
## Other ports: make run PORT=9080 (the gateway) GRPC_PORT_BASE=51051 (the six gRPC services).
run: install
	$(BIN)/python -m services.launcher $(if $(PORT),--port $(PORT)) $(if $(GRPC_PORT_BASE),--grpc-port-base $(GRPC_PORT_BASE))

## A development bearer token (make token SUB=alice).
token: install
	@$(BIN)/python -m services.gateway token --sub $(or $(SUB),dev-user)

## Regenerate the Python bindings of protos/ (never edit them by hand).
protos: install
	$(BIN)/python tools/gen_protos.py

buf-lint: tools
	tools/node/node_modules/.bin/buf lint

## Compare the protos with main's (FILE rules): a change that breaks deployed peers fails.
buf-breaking: tools
	@if git rev-parse --verify -q main >/dev/null; then \
		tools/node/node_modules/.bin/buf breaking --against '.git#branch=main'; \
	else echo "no main branch to compare with"; fi

lint: buf-lint

## The whole suite: once on the embedded default, once on real PostgreSQL + Redis.
test: install tools buf-lint buf-breaking test-embedded test-postgres

test-embedded: install tools
	AGENTMESH_TEST_BACKEND=embedded $(BIN)/python -m pytest -q

test-postgres: install tools
	@if [ "$$CI" = "true" ] || $(BIN)/python tools/backends_reachable.py; then \
		AGENTMESH_TEST_BACKEND=postgres $(BIN)/python -m pytest -q; \
	else \
		echo "PostgreSQL (127.0.0.1:5432) or Redis (127.0.0.1:6379) is not reachable:"; \
		echo "the postgres pass did not run here (in CI it always runs, and fails if they are down)."; \
	fi

## Benchmarks (see README "Performance"): make bench BENCH_ARGS="--duration 10 --concurrency 1,8,32"
bench: install
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf data results .pytest_cache
