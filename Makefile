PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: install run test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)  # (an upgrade beside a running service: install, then restart the service)
	$(PY) -m pip install -q -e '.[all]'

run: install
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
