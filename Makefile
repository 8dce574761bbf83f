# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create a virtual environment in .venv and install mkdist into it first; `make test`
# adds the test extras (pytest, moto, ruff, s3fs, numba, and the docs' Sphinx packages: the
# suite builds the docs), which the demo does not use.
# The inner loop: `make test-fast` (the tests not marked slow). The docs: `make docs`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# No internet here besides the package registries: Prefect must not phone home.
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

.PHONY: setup setup-test setup-docs demo test test-fast docs clean

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed-test
setup-docs: $(VENV)/.installed-docs

# One stamp per install: `make demo` then `make test` still installs the test extras (its
# stamp is missing), and a changed pyproject.toml renews both (the test stamp is then older
# than the base one).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@# numba compiles the embedding's loops into its disk cache now, not in the first run's workers
	$(BIN)/python -c "import mkdist.internals as m; m.warm_compiled()"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $@

demo: setup
	$(BIN)/mkdist demo

# --durations: CI's log shows where the suite's minutes go.
test: setup-test
	$(BIN)/python -m pytest -q --durations=15

test-fast: setup-test
	$(BIN)/python -m pytest -q -m "not slow" --durations=15

# Offline, warnings as errors, the gallery's examples executed (tests/test_docs.py runs the same).
docs: setup-docs
	$(BIN)/python -m sphinx -b html -W --keep-going docs docs/_build/html

clean:
	rm -rf $(VENV) runs .pytest_cache docs/_build docs/generated docs/auto_examples docs/sg_execution_times.rst
