# One-command set-up: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)

.PHONY: install demo test lint format bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all,dev]"
	rm -f $(VENV)/.installed-*
	touch $@

demo: install
	$(BIN)/spacetools demo

test: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

bench: install
	$(BIN)/python benchmarks/sim_render.py
	$(BIN)/python benchmarks/spatialsim_generate.py
	$(BIN)/python benchmarks/toolshed_throughput.py
	$(BIN)/python benchmarks/toolshed_scaleout.py
	$(BIN)/python benchmarks/rollout_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
