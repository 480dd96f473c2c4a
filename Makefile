# Everything the project needs is installed by these targets, on a fresh machine too.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
STAMP := .install.stamp

.PHONY: install demo lab test lint bench clean

# The JupyterLab extension (TypeScript in extension/) is prebuilt into xlalab/labextension,
# which the wheel ships; it is rebuilt only when its sources or lockfile change.
EXT := extension
EXT_DEPS := $(EXT)/node_modules/.package-lock.json
EXT_BUILD := xlalab/labextension/package.json
EXT_SOURCES := $(wildcard $(EXT)/src/*.ts $(EXT)/style/*) $(EXT)/package.json $(EXT)/tsconfig.json \
	$(EXT)/scripts/build-labextension.mjs

$(EXT_DEPS): $(EXT)/package-lock.json
	cd $(EXT) && npm ci --no-audit --no-fund

$(EXT_BUILD): $(EXT_DEPS) $(EXT_SOURCES)
	cd $(EXT) && npm run build:prod

# The extension is built before the first `pip install -e` (whose build hook would otherwise
# build it again); after that a rebuild needs no reinstall: `develop` links it into JupyterLab.
$(STAMP): pyproject.toml | $(EXT_BUILD)
	# torch==2.13.0 resolves to the local CPU wheel; an unpinned torch would pull CUDA.
	$(PIP) install torch==2.13.0
	# pip must not reinstall through an earlier `labextension develop` link: its uninstall would delete
	# the build in xlalab/labextension.
	link="$$($(PYTHON) -c 'import sys; print(sys.prefix)')/share/jupyter/labextensions/xlalab-jupyterlab"; \
		if [ -L "$$link" ]; then rm "$$link"; fi
	$(PIP) install -e ".[test]"
	# Link the extension into JupyterLab so a rebuild shows without reinstalling.
	$(PYTHON) -m jupyter labextension develop --overwrite .
	# The browser of the end-to-end tests (tests/e2e), Debian's Chromium, and gdb for dump-stacks,
	# when we may install them.
	command -v chromium >/dev/null && command -v gdb >/dev/null || if [ "$$(id -u)" = 0 ]; then \
		apt-get update && apt-get install -y chromium gdb; \
		else echo "chromium or gdb is missing and we are not root: install them for the tests"; fi
	touch $(STAMP)

install: $(STAMP) $(EXT_BUILD)

demo: install
	$(PYTHON) examples/mnist_train.py

# JupyterLab on the example notebooks, with the XLA panel; e.g. LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: install
	# As root (containers, CI machines) JupyterLab refuses to start without --allow-root.
	$(PYTHON) -m jupyter lab --notebook-dir=examples $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS)

test: install
	$(PYTHON) -m ruff check xlalab tests bench examples
	$(PYTHON) -m mypy xlalab
	cd $(EXT) && npm run lint && npm test
	$(PYTHON) -m pytest -q --timeout=900 tests

lint: install
	$(PYTHON) -m ruff check xlalab tests bench examples
	$(PYTHON) -m mypy xlalab
	cd $(EXT) && npm run lint

bench: install
	$(PYTHON) bench/bench_step.py

clean:
	rm -rf $(STAMP) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -rf xlalab/labextension $(EXT)/lib $(EXT)/tsconfig.tsbuildinfo

# Every OpInfo in PyTorch's op_db, lazy against eager (20-40 min on 2 cores): docs/op-coverage.md.
.PHONY: coverage
coverage: install
	$(PYTHON) -m xlalab.testing.opinfo_sweep --out docs/op-coverage.md
