PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# the versions of every package chatgate[all] needs, as tested (the Docker image installs the same)
PINS   := -c deploy/constraints.txt

.PHONY: install run test bench clean deploy-files constraints

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)  # (an upgrade beside a running service: install, then restart the service)
	$(PY) -m pip install -q $(PINS) -e '.[all]'

run: install
	$(VENV)/bin/chatgate run

test: $(PY)
	$(PY) -m pip install -q $(PINS) -e '.[dev]'
	$(PY) -m pytest

bench: $(PY)
	$(PY) -m pip install -q $(PINS) -e '.[dev]'
	$(PY) -m compileall -q gateway agent platforms  # bytecode, as an installed package has it
	$(PY) bench/table.py

deploy-files: $(PY)  # deploy/chatgate.service from gateway/ops/unit.py (a test fails when they differ)
	$(PY) -c "from gateway.ops.unit import shipped_unit; print(shipped_unit(), end='')" > deploy/chatgate.service

constraints: $(PY)  # newer versions: upgrade them in the venv, run the tests, then pin what passed
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) deploy/pin_versions.py > deploy/constraints.txt

clean:
	rm -rf $(VENV) build *.egg-info
