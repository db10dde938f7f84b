# One entry point. Every target bootstraps .venv from a clean clone (idempotent).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# GPU users: install a CUDA torch into .venv first, then `make setup TORCH_CONSTRAINT=` (see README).
TORCH_CONSTRAINT ?= -c constraints.txt
export HF_HUB_DISABLE_TELEMETRY := 1
export DVC_NO_ANALYTICS := 1
export DO_NOT_TRACK := 1

.PHONY: setup test lint reproduce clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_CONSTRAINT) -e ".[dev,pipeline]"
	touch $(STAMP)

test: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q $(PYTEST_ARGS)

# `make reproduce` runs the committed params.yaml; `make reproduce PARAMS=paper` first copies
# params/paper.yaml over it (recorded in dvc.lock and MLflow like any run).
PARAMS ?=
reproduce: $(STAMP)
	@if [ -n "$(PARAMS)" ]; then \
	  test -f params/$(PARAMS).yaml || { echo "no parameter set params/$(PARAMS).yaml" >&2; exit 2; }; \
	  cp params/$(PARAMS).yaml params.yaml; echo "params.yaml <- params/$(PARAMS).yaml"; fi
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests stages pipelines
	$(VENV)/bin/ruff format --check src tests stages pipelines

clean-venv:
	rm -rf $(VENV)
