# pbg-flow developer entry points. Every target installs what it needs into .venv/.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The stamp holds the checksum of the pyproject.toml it was installed from: reinstall when the content
# differs (file dates miss a changed pyproject.toml older than the stamp: tar, rsync -a, cp -p) or the
# venv's python is gone.
PYPROJECT_SUM := $(shell cksum < pyproject.toml)
ifneq ($(shell cat $(STAMP) 2>/dev/null),$(PYPROJECT_SUM))
.PHONY: $(STAMP)
else ifeq ($(wildcard $(PY)),)
.PHONY: $(STAMP)
endif

.PHONY: setup demo test test-long lint lint-imports bench-quality bench-speed bench-whole-run bench-overhead bench-prefect-costs bench-crash bench-s3-speed bench-deploy-latency bench-pipeline bench-export bench-import bench-livejournal bench-cluster-scaling bench-cluster-faults bench-scaling-model bench-retrain-days bench-similar bench-predict bench-quality-recipe compat pbg-venv pykeen-venv clean

$(STAMP):
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	cksum < pyproject.toml > $(STAMP)

setup: $(STAMP)

## demo: import the bundled UMLS graph, train it with the `pbg` flow, print filtered test metrics
demo: $(STAMP)
	bash examples/umls/run_demo.sh

## test: lint and type checks, import-layer contracts, then the whole test suite on 2 pytest-xdist workers, a test file
## whole per worker (tests/deployments/ as one: its files share a local Prefect stack; tests/conftest.py). Most tests
## wait on subprocesses and servers, so 2 workers on 2 cores cut the time (`.venv/bin/python -m pytest` runs serially).
test: lint
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n 2 --dist loadfile --durations=25

## lint: ruff (lint rules and format check, in pyproject.toml) and mypy (strict for pbg_core, the default level for the rest)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## test-long: what the default run keeps short, at full length (CI runs it after `make test`): a 100-iteration
## deployed run's server log, then every test marked `slow` (long end-to-end checks: Ctrl-C/SIGTERM/kill -9 at every
## moment, scheduled retraining runs, crashed and cancelled deployed runs, cluster faults, TLS and the cluster
## deployment, S3 outages, imports against training runs, init_path by name through the CLI, the UMLS demo's figures)
## Serially (no -n): its signal tests aim Ctrl-C/SIGTERM at moments of a run, and its Dask clusters and fault tests
## time processes; another worker's load beside them would move those moments.
test-long: $(STAMP)
	PBG_LONG_RUN_ITERATIONS=100 $(PY) -m pytest tests/deployments/test_long_run.py
	PBG_SLOW_TESTS=1 $(PY) -m pytest -m slow --durations=25

lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

## compat: PBG file compatibility both ways against PyPI torchbiggraph 1.0.0 (the default test run skips these without it)
compat: $(STAMP) pbg-venv
	$(PY) -m pytest -m compat tests/compat -rs

## PyPI torchbiggraph==1.0.0 in its own virtualenv, for side-by-side benchmarks
pbg-venv:
	bash bench/setup_pbg_venv.sh

bench-quality: $(STAMP)
	$(PY) -m bench.quality

bench-speed: $(STAMP) pbg-venv
	$(PY) -m bench.speed

## whole train commands, PBG 1.0.0 vs ours (UMLS demo, KG, config A); BENCH_LOCK=/tmp/pbg-bench.lock on a shared machine
bench-whole-run: $(STAMP) pbg-venv
	$(PY) -m bench.whole_run $(if $(BENCH_LOCK),--lock $(BENCH_LOCK))

bench-overhead: $(STAMP)
	$(PY) -m bench.overhead

bench-prefect-costs: $(STAMP)
	$(PY) -m bench.prefect_costs

bench-crash: $(STAMP)
	$(PY) -m bench.crash

bench-s3-speed: $(STAMP)
	$(PY) -m bench.s3_speed

bench-import: $(STAMP) pbg-venv
	$(PY) -m bench.import_speed

bench-export: $(STAMP) pbg-venv
	$(PY) -m bench.export_speed

bench-deploy-latency: $(STAMP)
	$(PY) -m bench.deploy_latency

## what the product's iteration order costs: iteration subflows in order (flows/train.py) vs pipelined (bench/lib/pipelined.py), deployed (local stack, heartbeats on) and embedded
bench-pipeline: $(STAMP)
	$(PY) -m bench.pipeline $(if $(BENCH_LOCK),--lock $(BENCH_LOCK))

## LiveJournal-sized graph (4.85M nodes, 68.5M edges, d=1024, 8 partitions), one epoch, PBG 1.0.0 beside it: about 45 min, about 49 GB of free disk
bench-livejournal: $(STAMP) pbg-venv
	$(PY) -m bench.livejournal $(if $(BENCH_LOCK),--lock $(BENCH_LOCK))

## 1 machine vs 2 Dask workers on an 8.08M-edge 4x4 planted graph: MRR parity (3 seeds; delta and average merges), scaling with its ceiling pair: about 45 min
bench-cluster-scaling: $(STAMP)
	$(PY) -m bench.cluster_scaling $(if $(BENCH_LOCK),--lock $(BENCH_LOCK))

## kill -9 of a Dask worker (command-line cluster on 127.0.0.1) while training, saving, committing: a few minutes
bench-cluster-faults: $(STAMP)
	$(PY) -m bench.cluster_faults

## docs/scaling.md's predictions: epoch time of a Twitter-sized graph on 1-64 machines from the measured per-bucket costs (a few minutes)
bench-scaling-model: $(STAMP)
	$(PY) -m bench.scaling_model

## simulated days on an 800k-edge growing graph: incremental retraining vs from scratch every day, ~15 minutes
bench-retrain-days: $(STAMP)
	$(PY) -m bench.retrain_days

## similar: FLAT_MAX_ROWS (where exact search stops answering 1,000 queries in 1 s), then exact vs the faiss index on 1M x 100 in 8 partitions, 10,000 queries (about 10 minutes)
bench-similar: $(STAMP)
	$(PY) -m bench.similar

## PyKEEN 1.11 in its own virtualenv ($$PYKEEN_VENV, default bench/.pykeen-venv), for bench-predict's side-by-side
pykeen-venv:
	bash bench/setup_pykeen_venv.sh

## predict: ranks vs pbg eval and brute force on UMLS, 10,000 queries on 1M x 100 in 8 partitions vs the compute bound, PyKEEN and the faiss recipe beside it (about 15 minutes)
bench-predict: $(STAMP) pykeen-venv
	$(PY) -m bench.predict

## quality side by side: ours (PBG defaults, examples/kg recipe, tuned config) vs PyKEEN 1.11's best cheap recipe on UMLS, Kinships, Nations, 3 seeds (about 20 min on 2 cores, 10 of them PyKEEN's); LARGE=1: PBG defaults vs the recipe on a 40k-entity planted graph (about 6 min, plus the graph's generation once)
bench-quality-recipe: $(STAMP) pykeen-venv
	$(PY) -m bench.quality_recipe $(if $(LARGE),--large)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
