# One entry point. Every target bootstraps .venv from a clean clone (idempotent).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# GPU users: install a CUDA build of the pinned torch into .venv first, then `make setup` (docs/scale-out.md).
TORCH_CONSTRAINT ?= -c constraints.txt
export HF_HUB_DISABLE_TELEMETRY := 1
export DVC_NO_ANALYTICS := 1
export DO_NOT_TRACK := 1

.PHONY: setup test lint reproduce docs docs-check clean-venv dvc-yaml dvc-deps

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_CONSTRAINT) -e ".[dev,pipeline]"
	touch $(STAMP)

# the suite runs on PYTEST_WORKERS pytest-xdist processes (one torch thread each; the end-to-end tests'
# stages run one thread too), so a 2-core machine keeps both cores busy; PYTEST_WORKERS=0 runs it in
# this one process
PYTEST_WORKERS ?= 2
test: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# `make reproduce` runs the committed params.yaml here; `make reproduce PARAMS=paper` runs the set
# params/paper.yaml (composed over params.yaml) in its own folder sets/paper/: `focalcse params use`
# writes its params.yaml and dvc.yaml there, and its data, models, metrics, report and dvc.lock stay
# there, so one set never prunes or overwrites another's. Either way the parameters are validated
# before DVC reads dvc.yaml (docs/reliability.md). Last, the default's run re-renders the numbers
# README.md and docs/*.md quote (`make docs`) from the results it just wrote.
# A relative FOCALCSE_DATA_MIRROR (or FOCALCSE_CACHE) is the user's, typed where make runs: made absolute
# here, before the recipe changes into a set's folder
ifneq ($(strip $(FOCALCSE_DATA_MIRROR)),)
export FOCALCSE_DATA_MIRROR := $(abspath $(FOCALCSE_DATA_MIRROR))
endif
ifneq ($(strip $(FOCALCSE_CACHE)),)
export FOCALCSE_CACHE := $(abspath $(FOCALCSE_CACHE))
endif
# REPRO_ARGS: more `dvc repro` arguments, e.g. REPRO_ARGS=-f to rerun every stage (a full run's wall time)
PARAMS ?=
REPRO_ARGS ?=
reproduce: $(STAMP)
	@if [ -n "$(PARAMS)" ]; then $(VENV)/bin/focalcse params use $(PARAMS) || exit 2; \
	else $(VENV)/bin/focalcse params check || exit 2; fi
	cd $(if $(PARAMS),sets/$(PARAMS),.) && \
	  FOCALCSE_RUN_STARTED=$$(date +%s) FOCALCSE_RUN_COMMAND="make reproduce$(if $(PARAMS), PARAMS=$(PARAMS))" \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(CURDIR)/$(VENV)/bin/dvc repro $(REPRO_ARGS)
	@if [ -z "$(PARAMS)" ]; then echo "cog -r README.md docs/*.md"; $(VENV)/bin/cog -r $(DOCS) >/dev/null || exit 1; fi

# The numbers of README.md and docs/*.md, rendered from the committed result files between cog markers
# (src/focalcse/evidence/docs_blocks.py, bench_blocks.py); `make docs-check` (and tests/test_docs_fresh.py) fails on a stale block.
DOCS := README.md $(wildcard docs/*.md)
docs: $(STAMP)
	$(VENV)/bin/cog -r $(DOCS)

docs-check: $(STAMP)
	$(VENV)/bin/cog --check $(DOCS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests stages pipelines scripts benchmarks
	$(VENV)/bin/ruff format --check src tests stages pipelines scripts benchmarks

clean-venv:
	rm -rf $(VENV)

# dvc.yaml, rendered whole from the stage table (src/focalcse/stage_table.py); code deps = each stage's
# import closure, observers (tracking, provenance) left out (src/focalcse/ops/dvc_yaml.py;
# tests/test_dvc_yaml.py fails until this has been run after a table or import change)
dvc-yaml: $(STAMP)
	$(PY) -m focalcse.ops.dvc_yaml

dvc-deps: dvc-yaml  # the former name

# ---- tracking and orchestration (MLflow UI, Prefect server / deployments) ----
MLFLOW_PORT ?= 5000
PREFECT_PORT ?= 4200
PREFECT_API ?= http://127.0.0.1:$(PREFECT_PORT)/api
# `make serve SERVE_ARGS='--cron "0 3 * * *" --param-set paper'`; `make flow` triggers a reproduce run
# now, parameters as JSON: make flow FLOW_PARAMS='{"concurrency": 4}' FLOW_ARGS=--watch
FLOW_PARAMS ?= {}
.PHONY: mlflow-ui prefect-server serve flow exp-show

# DVC experiments side by side: changed metrics and params (dependency-hash columns, named by paths, dropped)
exp-show: $(STAMP)
	$(VENV)/bin/dvc exp show --only-changed --drop '.*/.*'

mlflow-ui: $(STAMP)
	@echo "MLflow UI: http://127.0.0.1:$(MLFLOW_PORT)/#/experiments?workflowType=machine_learning"
	@echo "  (MLflow 3.17 opens an experiment on its GenAI page until the sidebar's 'Model training' switch is set once; the browser remembers it)"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow server --backend-store-uri sqlite:///mlflow.db \
	  --artifacts-destination ./mlartifacts --host 127.0.0.1 --port $(MLFLOW_PORT) --workers 1

# the UI asks the API at PREFECT_UI_API_URL (else a PREFECT_API_URL from the env or profile, else port 4200)
prefect-server: $(STAMP)
	PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_UI_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api \
	  $(VENV)/bin/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

serve: $(STAMP)
	PREFECT_API_URL=$(PREFECT_API) $(PY) -m pipelines.serve $(SERVE_ARGS)

flow: $(STAMP)
	PREFECT_API_URL=$(PREFECT_API) $(VENV)/bin/prefect deployment run reproduce/reproduce --params '$(FLOW_PARAMS)' $(FLOW_ARGS)

# ---- several machines: a Prefect work pool (pipelines/pool.py; README "Scale out") ----
POOL ?= focalcse
POOL_SOURCE ?= $(CURDIR)
WORKER ?= $(shell hostname)
.PHONY: pool-deploy pool-worker pool-run pool-demo

pool-deploy: $(STAMP)  # once: the work pool and the dvc-stage-item/pool deployment (POOL_SOURCE: git URL for several machines)
	PREFECT_API_URL=$(PREFECT_API) $(PY) -m pipelines.pool deploy --pool $(POOL) --source $(POOL_SOURCE)

pool-worker: $(STAMP)  # on every machine: take pool items one at a time (stops on the first Ctrl-C / SIGTERM)
	PREFECT_API_URL=$(PREFECT_API) $(VENV)/bin/focalcse worker --pool $(POOL) --name $(WORKER) --limit 1

pool-run: $(STAMP)  # the coordinator, from this checkout: make pool-run POOL_ARGS='--dvc-remote s3://bucket/focalcse'
	PREFECT_API_URL=$(PREFECT_API) PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pipelines.pool run $(POOL_ARGS)

pool-demo: $(STAMP)  # two workers on this machine, tiny config, servers on free ports (scripts/pool_demo.py)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) scripts/pool_demo.py $(DEMO_ARGS)
