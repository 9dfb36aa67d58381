# Two entry points: `make train` (set up, then train on the embedded doodles) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
TEST_WORKERS ?= 2

.PHONY: setup train lint test check benchmark clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[tensorflow,jax,test]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python -m acgan.train $(ARGS)

# The suite as two pytest sessions, one per Keras backend (KERAS_BACKEND: tests/conftest.py says which tests
# each collects), each on $(TEST_WORKERS) pytest-xdist workers with a file's tests on one worker (so a module's
# shared run is made once). ARGS goes to both (e.g. ARGS="-k cli"); a session that selects nothing is no failure.
# -c: the settings file named, so an ARGS value that is an existing file (--cpu-times FILE, the second
# session) cannot move pytest's root away from this folder.
PYTEST = $(BIN)/python -m pytest -c pyproject.toml -q -n $(TEST_WORKERS) --dist loadfile
define sessions
	@status=0; for backend in tensorflow jax; do \
	  echo "== KERAS_BACKEND=$$backend"; \
	  KERAS_BACKEND=$$backend $(PYTEST) $(1) $(ARGS); code=$$?; \
	  [ $$code -eq 0 ] || [ $$code -eq 5 ] || status=1; \
	done; exit $$status
endef

# The style is held by tools, as the tests hold behaviour: ruff's formatter and linter (pyproject.toml) first.
lint: $(STAMP)
	$(BIN)/ruff format --check acgan tests scripts
	$(BIN)/ruff check acgan tests scripts

test: lint
	$(call sessions,)

# The inner loop: the linter, then both sessions without the tests marked slow (those that train, compile a
# step or start a process).
check: lint
	$(call sessions,-m "not slow")

benchmark: $(STAMP)
	$(BIN)/python -m acgan.benchmark $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
