# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Elsewhere than this machine, a CPU-only torch may need its index, e.g.
#   make demo TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TORCH  ?= torch==2.13.0
PARAMS ?= params/tiny.yaml
# The demo runs on the shipped world (stages 01-02 read from it, the same people, documents and
# secrets for everyone who runs it); `make demo WORLD=` generates a world of its own instead.
WORLD  ?= worlds/tiny-v1

.PHONY: demo install models run lab lint test test-fast browser bench clean-venv

demo: install models run

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name pbench --display-name "Python (pbench)"
	touch $@

models: install
	$(BIN)/pbench models

run: install
	$(BIN)/pbench run $(PARAMS) $(if $(WORLD),--world $(WORLD))

# JupyterLab on notebooks/ with the project's kernel ("Python (pbench)"). Each notebook's
# parameters cell points at params/tiny.yaml and outputs/tiny: run `make demo` first, then
# run any notebook top to bottom. Kernels get CurveZMQ keys, as in `pbench run`.
# Options go through LAB_ARGS, e.g. make lab LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: install
	$(BIN)/jupyter lab --notebook-dir=notebooks --KernelManager.transport_encryption=auto \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# The linter's and the type checker's rules are pyproject.toml's [tool.ruff] and [tool.mypy]:
# each must find nothing (a waiver is in the config, with its reason).
lint: install
	$(BIN)/ruff check pbench
	$(BIN)/mypy

# The fast tests on every core (pytest-xdist, a worker per core, a test file to a worker so that
# a module's fixtures are built once), then the slow ones one at a time: an embedded model's server
# takes every core itself, and two of them at once would fight over them. Both parts always run;
# pytest exits 5 when it collects nothing: a failure, not a pass.
FAST := -m "not slow" -n auto --dist loadfile
test: install models browser lint
	@fast=0; slow=0; \
	$(BIN)/python -m pytest $(FAST) || fast=$$?; \
	$(BIN)/python -m pytest -m slow || slow=$$?; \
	for rc in $$fast $$slow; do if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; done; \
	if [ $$fast -ne 0 ] || [ $$slow -ne 0 ]; then echo "tests failed: fast part exit $$fast, slow part exit $$slow" >&2; exit 1; fi

# The report is checked in headless Chromium. Installed from Debian's packages where we can
# (root with apt-get); elsewhere its test is skipped and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } || \
	    echo "warning: could not install chromium; the report's browser test will be skipped" >&2; \
	  else echo "note: chromium not found; the report's browser test will be skipped" >&2; fi; }

test-fast: install lint
	$(BIN)/python -m pytest $(FAST)

# Every benchmark, each printing its figures (about 40 minutes on 2 cores, the tiny run included).
bench: install models
	$(BIN)/python bench/llm_throughput.py
	$(BIN)/python bench/retrieval.py
	$(BIN)/pbench run $(PARAMS) --quiet
	$(BIN)/python bench/overhead.py --torch-threads 1
	$(BIN)/python bench/concurrency.py
	$(BIN)/python bench/generation_cost.py --params $(PARAMS)
	$(BIN)/python bench/reproduce.py --params $(PARAMS)
	$(BIN)/python bench/appends.py
	$(BIN)/python -m bench.report_load
	$(BIN)/python -m bench.kill_stress --points 10
	@echo "paper scale (about 25 minutes more): $(BIN)/python bench/paper_scale.py --help"

clean-venv:
	rm -rf $(VENV)
