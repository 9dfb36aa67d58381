# Two entry points: `make train` (set up, then train on the embedded doodles) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup train test benchmark clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[tensorflow,jax,test]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python -m acgan.train $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

benchmark: $(STAMP)
	$(BIN)/python -m acgan.benchmark $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
