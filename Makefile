# tasklease: every target installs what it needs (uv, then the locked dependencies).
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV ?= $(shell command -v uv 2>/dev/null || echo "$(HOME)/.local/bin/uv")
VENV := .venv
STAMP := $(VENV)/.synced

.PHONY: help run test test-unit test-localstack lint typecheck check sweep clean localstack-start localstack-stop

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(UV):
	@command -v uv >/dev/null 2>&1 || { echo "installing uv with pip…"; python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv; }

$(STAMP): pyproject.toml uv.lock | $(UV)
	@$(UV) sync --locked --all-extras --quiet
	@touch $@

install: $(STAMP) ## install the locked dependencies into .venv

run: $(STAMP) ## the whole system on this machine, with demo jobs (Ctrl-C stops it)
	@$(UV) run --no-sync tasklease dev $(ARGS)

test: $(STAMP) ## the test suite against embedded PostgreSQL and moto's SQS server
	@$(UV) run --no-sync pytest $(ARGS)

test-unit: $(STAMP) ## only the unit tests (no servers)
	@$(UV) run --no-sync pytest -m unit $(ARGS)

test-localstack: $(STAMP) ## the integration and end-to-end tests against LocalStack (host mode, no Docker)
	@rc=0; bash localstack/run.sh start >/dev/null || rc=$$?; \
	if [ $$rc -eq 3 ] && [ "$${CI:-}" != "true" ]; then \
	  echo "test-localstack: SKIPPED, Python 3.13 (needed by LocalStack) was not found; CI=true makes this a failure"; exit 0; \
	elif [ $$rc -ne 0 ]; then echo "test-localstack: LocalStack did not start (exit $$rc)"; exit $$rc; fi; \
	trap 'bash localstack/run.sh stop' EXIT; \
	TASKLEASE_TEST_SQS=localstack LOCALSTACK_ENDPOINT=http://127.0.0.1:$${LOCALSTACK_PORT:-4566} \
	  $(UV) run --no-sync pytest -m "integration or e2e" $(ARGS)

lint: $(STAMP) ## ruff
	@$(UV) run --no-sync ruff check app handlers tests
	@$(UV) run --no-sync ruff format --check app handlers tests

typecheck: $(STAMP) ## mypy --strict
	@$(UV) run --no-sync mypy

check: lint typecheck ## lint and type-check

localstack-start: ## start LocalStack in host mode (no Docker) on 127.0.0.1:4566
	@bash localstack/run.sh start

localstack-stop: ## stop it
	@bash localstack/run.sh stop

clean: ## remove the virtual environment and local data (.tasklease/, .localstack/)
	rm -rf $(VENV) .tasklease .localstack .pytest_cache .mypy_cache .ruff_cache
