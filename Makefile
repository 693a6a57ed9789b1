# Set-up and the two everyday jobs. Everything lives in ./.venv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-all lint bench clean

# The main job: the thesis experiment (1,000 peers, 5,000 subscriptions, 10,000 events), every
# delivery checked by a brute-force oracle, with its summary next to the thesis' figures; then
# its run log summarised by Spark (local mode) into an HTML report with the thesis' figures.
DEMO := runs/thesis-seed1
demo: $(VENV)/.installed
	$(BIN)/rangecast sim run thesis --seed 1 --out $(DEMO) --force
	$(BIN)/rangecast report $(DEMO) --out-dir $(DEMO)/report

# The tests CI runs: the fast suite (slow scenario tests are marked and skipped), the linter and
# the type checker (on the packages [tool.mypy] names). Two worker processes, a test file each
# at a time (pytest-xdist, --dist loadfile): every file that starts peers picks its ports in its
# own range, so two files never collide; 7 min instead of 12 on the 2-core machine.
test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# Everything, slow scenarios included.
test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "slow or not slow"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(VENV)/.installed
	$(BIN)/python bench/sim_throughput.py

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The editable install maps the `rangecast` package to ./rangecast (links to the layer folders);
# setuptools warns about a folder named like the package in the working directory, which here is
# that package itself.
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

# The hot modules Cython compiles (rangecast/_compiled.py): an edit to one rebuilds them (until
# then it runs interpreted, with a warning naming it: rangecast/_speed.py).
COMPILED := $(shell sed -n 's/^    "rangecast\.\(.*\)",$$/\1/p' rangecast/_compiled.py | tr . / | sed 's/$$/.py/')
BUILT_FROM := pyproject.toml setup.py sim/_hugepages.c rangecast/_compiled.py $(COMPILED)

$(VENV)/.installed: $(BUILT_FROM) | $(VENV)/bin/python
	$(QUIET_EDITABLE) $(BIN)/python -m pip install -q -e '.[spark]'
	touch $@

$(VENV)/.installed-test: $(BUILT_FROM) | $(VENV)/bin/python
	$(QUIET_EDITABLE) $(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $@ $(VENV)/.installed

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
