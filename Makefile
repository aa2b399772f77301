PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: run test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

run: $(PY)
	$(PY) -m pip install -q -e '.[all]'
	$(VENV)/bin/chatgate run

test: $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pytest

bench: $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m compileall -q gateway agent platforms  # bytecode, as an installed package has it
	$(PY) bench/table.py

clean:
	rm -rf $(VENV) build *.egg-info
