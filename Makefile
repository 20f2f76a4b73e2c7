# The two commands a new user runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DAYS ?= 10
# A second environment with the oldest Scrapy setup.cfg accepts, every package pinned.
VENV_MIN := .venv-min
BIN_MIN := $(VENV_MIN)/bin
MIN_CONSTRAINTS := .ci/scrapy-min.txt
# The HTML report's tests open it in Debian's headless Chromium (tests/chromium.py).
CHROMIUM := /usr/bin/chromium
# Extra pytest arguments, e.g. `make test-min PYTEST_ARGS="-x -q"`.
PYTEST_ARGS ?=

.PHONY: demo test test-latest test-min lint clean

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# Rebuilt from scratch (--clear) when setup.cfg or the constraints change, so nothing lingers.
# After the main environment: both editable installs write the same scrapy_costsched.egg-info.
$(BIN_MIN)/.installed: setup.cfg pyproject.toml $(MIN_CONSTRAINTS) | $(BIN)/.installed
	$(PYTHON) -m venv --clear $(VENV_MIN)
	$(BIN_MIN)/python -m pip install --quiet --upgrade pip
	$(BIN_MIN)/python -m pip install --quiet -c $(MIN_CONSTRAINTS) -e '.[test]'
	$(BIN_MIN)/python -m pip check
	touch $@

# Installed from Debian when missing (as root); present, it is left as it is.
$(CHROMIUM):
	apt-get update && apt-get install -y --no-install-recommends chromium

demo: $(BIN)/.installed
	$(BIN)/python example_project/run_demo.py --days $(DAYS) --workdir demo-output --json demo-output/summary.json

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

# Lint once, then the whole suite under the newest Scrapy (.venv) and again under the minimum
# (.venv-min). The second suite runs even if the first fails; `make test` fails if either does.
test: lint $(BIN_MIN)/.installed $(CHROMIUM)
	@status=0; \
	echo "== pytest in $(VENV): Scrapy $$($(BIN)/python -c 'import scrapy; print(scrapy.__version__)')"; \
	$(BIN)/python -m pytest $(PYTEST_ARGS) || status=1; \
	echo "== pytest in $(VENV_MIN): Scrapy $$($(BIN_MIN)/python -c 'import scrapy; print(scrapy.__version__)')"; \
	$(BIN_MIN)/python -m pytest $(PYTEST_ARGS) || status=1; \
	exit $$status

# One environment's suite, without lint.
test-latest: $(BIN)/.installed $(CHROMIUM)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-min: $(BIN_MIN)/.installed $(CHROMIUM)
	$(BIN_MIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV_MIN) demo-output .pytest_cache .mypy_cache .ruff_cache
