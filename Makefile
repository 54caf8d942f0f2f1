# Set-up and checks. `make demo` and `make test` work on a fresh clone: each creates .venv as needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
# Prefer the tests' own isolation over anything inherited from the caller's shell.
PYTEST_ARGS ?=

.PHONY: demo test test-fast bench clean venv-demo venv-dev dist system-deps docs docs-serve

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[cpu,examples]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[cpu,examples,dev]'
	touch $@ $(VENV)/.demo-installed

venv-demo: $(VENV)/.demo-installed
venv-dev: $(VENV)/.dev-installed

## demo: train the digits model on 2 local workers under the tfdist supervisor
demo: venv-demo
	$(BIN)/tfdist launch -n 2 --max-restarts 2 --log-dir .tfdist-demo/logs --tee -m tfdist.examples.digits \
		--model-dir .tfdist-demo/model

## dist: build the wheel and the sdist into dist/ (python -m build)
dist: | $(BIN)/python
	$(PIP) install --quiet build
	rm -rf dist
	$(BIN)/python -m build --outdir dist . > build-dist.log 2>&1 || { cat build-dist.log; exit 1; }
	@rm -f build-dist.log; ls dist

## system-deps: the system packages the tests use (Slurm, munge, Prometheus, zsh, fish, tmux, OpenSSH, iproute2), as CI installs them
system-deps:
	bash .ci/system-deps.sh

## test: the whole suite (unit, CLI, integration with real processes), after the system packages it uses
test: system-deps venv-dev
	$(BIN)/python -m pytest $(PYTEST_ARGS); status=$$?; bash .ci/system-deps.sh --check; exit $$status

## test-fast: everything not marked slow or listed in tests/slow_cases.py (the quick loop: about 1 minute of CPU; the standard is under 2 minutes on 2 cores)
test-fast: venv-dev
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# NO_MKDOCS_2_WARNING: Material prints its end-of-life notice (May 2027) on every start otherwise.
## docs: build the documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link, a missing page or snippet, a page left out of the navigation fails (make test checks the same)
docs: venv-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

## docs-serve: the documentation site at http://127.0.0.1:8000, rebuilt as the pages change
docs-serve: venv-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --dev-addr 127.0.0.1:8000

bench: venv-dev
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .tfdist-demo .pytest_cache build dist site src/*.egg-info
