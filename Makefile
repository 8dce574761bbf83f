# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create a virtual environment in .venv and install mkdist into it first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# No internet here besides the package registries: Prefect must not phone home.
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

demo: setup
	$(BIN)/mkdist demo

test: setup
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
