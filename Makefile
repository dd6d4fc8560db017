# airflow-provider-tsb developer targets. Every target creates the virtualenv it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
MODE ?= streaming
ENGINE ?= connect
DAYS ?=
WRITER ?=
PYTEST_ARGS ?=
# pytest-xdist workers of make test: one more than the cores. The suite waits on Airflow, Spark
# and subprocesses for part of its time: on the 2-core development machine 3 workers kept the
# CPUs 99 % busy and ran it in 760 s; 2 workers took 803 s without the browser tests' 55 s
# (tests/conftest.py groups the tests)
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
# Python's bytecode cache. uv compiles nothing at install (pip compiles by default), and an
# environment with PYTHONDONTWRITEBYTECODE=1 (this development machine's) writes no cache either:
# every Airflow task, Spark driver, Connect client and CLI process then compiled every module it
# imported from source (pytest's collection: 11.2 s -> 5.4 s, `import pyspark.sql.connect.session`
# 2.0 s -> 0.8 s with the cache). Install compiles the dependencies; targets may write the cache.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help venv install check-java demo demo-stop test test-unit lint docs dist bench clean

help:
	@echo "make demo       stream the flights topology on real data under a real Airflow (MODE=batch, DAYS=N, ENGINE=submit, WRITER=delta)"
	@echo "make demo-stop  stop the Airflow started by make demo"
	@echo "make test       run the test suite (starts its own PostgreSQL and Airflow)"
	@echo "make test-unit  run the fast tier: no JVM, no PostgreSQL, no Airflow process"
	@echo "make docs       build the docs site into site/ (mkdocs --strict)"
	@echo "make dist       build the sdist and wheel into dist/ and check them (twine check)"
	@echo "make lint       ruff, and every documented parameter in its signature (pydoclint)"
	@echo "make bench      run the benchmarks"

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11+" >&2; exit 2; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "error: Python 3.11+ is required, $(PYTHON) is $$($(PYTHON) --version)" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)

$(UV): | $(PY)
	$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --default-pip >/dev/null
	$(PY) -m pip install -q --upgrade pip uv

$(VENV)/.installed: pyproject.toml airflow_provider_tsb/spark/jvm/pom.xml | $(UV)
	$(UV) pip install -p $(PY) -q --compile-bytecode -e '.[test,postgres,data]'
	$(PY) -m airflow_provider_tsb spark jars --fetch
	@touch $@

venv install: $(VENV)/.installed

check-java:
	@command -v java >/dev/null || { echo "error: Java 17+ is required by Spark and was not found on PATH; install it (e.g. 'apt-get install -y openjdk-17-jre-headless') and retry" >&2; exit 2; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "error: Java 17+ is required by Spark, found '$$(java -version 2>&1 | head -1)'" >&2; exit 2; fi

demo: install check-java
	$(if $(WRITER),TSB_SINK_WRITER=$(WRITER)) $(PY) -m dev.demo --mode $(MODE) --engine $(ENGINE) $(if $(DAYS),--days $(DAYS))

demo-stop: install
	$(PY) -m dev.demo stop

test: install check-java
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-unit: install
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: install
	$(VENV)/bin/ruff check airflow_provider_tsb dev dags spark_apps tests benchmarks
	$(PY) dev/doc_params.py airflow_provider_tsb

dist: install
	$(UV) pip install -p $(PY) -q build twine
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

bench: install check-java
	$(PY) -m benchmarks.e2e_latency
	$(PY) -m benchmarks.full_year
	$(PY) -m benchmarks.barrier_overhead
	$(PY) -m benchmarks.metastore_scale
	$(PY) -m benchmarks.ui_scale
	$(PY) -m benchmarks.cli_startup
	$(PY) -m benchmarks.submit_start

clean:
	rm -rf $(VENV) .demo .pytest_cache test-output site dist build
