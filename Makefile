# Two commands do all the set-up on a fresh machine:
#   make demo   capture, replay and import a small real example, with a summary
#   make test   the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

# CPU torch is pinned for these machines (a wheel on local disk); real users bring their own torch.
$(STAMP): pyproject.toml setup.py requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q -e .
	touch $(STAMP)

demo: setup
	$(PY) tools/demo.py demo-out

test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: setup
	$(PY) tools/bench/run_all.py

clean:
	rm -rf $(VENV) demo-out
