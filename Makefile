# Two entry points: `make train` (set up, then train on the embedded doodles) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
TEST_WORKERS ?= 2

.PHONY: setup train test benchmark clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[tensorflow,jax,test]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python -m acgan.train $(ARGS)

# The suite on $(TEST_WORKERS) pytest-xdist workers, a file's tests on one worker (so a module's shared run is
# made once); ARGS goes to pytest (e.g. ARGS="-m 'not slow'").
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(ARGS)

benchmark: $(STAMP)
	$(BIN)/python -m acgan.benchmark $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
