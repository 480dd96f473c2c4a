# Everything the project needs is installed by these targets, on a fresh machine too.
# PYTHON names the Python to install into and run with: python3 on PATH by default, or any other,
# e.g. `make PYTHON=venv/bin/python install` with the venv not activated. Python tools run as
# `$(PYTHON) -m ...`, never looked up on PATH (which may hold another environment's, or none);
# PATH supplies only the system's make, npm/node and apt-get.
PYTHON ?= python3
PIP := $(PYTHON) -m pip

# The versions CI tested: every package `pip install -e .[test]` brings, and the build backend,
# pinned (make lock refreshes the file; docs/setup.md). pyproject.toml keeps open ranges for
# `pip install xlalab` users. PIP_CONSTRAINT reaches pip's isolated build environments too.
# It is resolved with CPython 3.11.7 on Linux x86-64; `make LOCK= install` takes the newest versions
# pyproject.toml allows instead (a Python the lock does not fit, or to try tomorrow's versions).
LOCK ?= requirements/lock.txt
PIP_LOCKED := PIP_CONSTRAINT="$(if $(LOCK),$(abspath $(LOCK)))" $(PIP)
OR_LOCK_HINT := $(if $(LOCK),|| { echo "pip could not install the versions in $(LOCK) into $(PYTHON): \
	run 'make PYTHON=$(PYTHON) lock' to resolve them for it or 'make LOCK= install' for the newest \
	versions pyproject.toml allows"; exit 1; })

# One stamp per Python environment: installing into one says nothing about another. The key is
# the environment's prefix, the identity of its site-packages (a venv made anew at the same path
# gets a new one), pip's user scheme, this checkout, and where that environment's xlalab comes
# from: an editable install made from another checkout (or none) means this one is not installed.
PY_KEY_COMMAND = $(PYTHON) -c 'import hashlib, importlib.metadata as md, os, sys, sysconfig; \
	k = [sys.prefix, str(os.stat(sysconfig.get_path("purelib")).st_ino), \
	os.environ.get("PIP_USER", ""), os.environ.get("PYTHONUSERBASE", ""), os.getcwd()]; \
	k += [d.read_text("direct_url.json") or "" for d in md.distributions(name="xlalab")]; \
	print(hashlib.sha1("|".join(k).encode()).hexdigest()[:12])' 2>/dev/null || echo missing-python
PY_KEY = $(shell $(PY_KEY_COMMAND))
STAMP := .install-$(PY_KEY).stamp

.PHONY: install demo lab lab-notebooks test lint bench fuzz lock clean

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

# Where pip put the wheel's shared-data copy of the extension (<prefix>/share/jupyter/labextensions
# for a venv or a system Python, ~/.local/share/... for pip's user scheme), read from the
# installed distribution's RECORD. `link` replaces that copy with a link to xlalab/labextension, so
# a rebuild shows in JupyterLab without reinstalling; `unlink` removes the link before pip runs,
# because pip's uninstall would follow it and delete the build in xlalab/labextension.
define LABEXTENSION_LINK
import importlib.metadata, os, shutil, sys
from pathlib import Path
build = Path("xlalab/labextension").resolve()
try:
    dist = importlib.metadata.distribution("xlalab")
except importlib.metadata.PackageNotFoundError:
    sys.exit(0)
manifests = [f for f in dist.files or [] if f.match("share/jupyter/labextensions/xlalab-jupyterlab/package.json")]
if not manifests:
    sys.exit("the installed xlalab has no share/jupyter/labextensions/xlalab-jupyterlab: was it built without xlalab/labextension?")
target = Path(os.path.normpath(dist.locate_file(manifests[0]))).parent
if target.is_symlink():
    target.unlink()
if sys.argv[1] == "link":
    if target.exists():
        shutil.rmtree(target)
    target.symlink_to(build, target_is_directory=True)
    print(f"linked {target} -> {build}")
endef
export LABEXTENSION_LINK

# The extension is built before the first `pip install -e` (whose build hook would otherwise
# build it again).
$(STAMP): pyproject.toml $(LOCK) $(wildcard xlalab/_hook/*) | $(EXT_BUILD)
	@command -v $(PYTHON) >/dev/null || { echo "PYTHON=$(PYTHON): no such Python (name an interpreter, e.g. venv/bin/python)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "xlalab needs Python 3.10 or newer")'
	# torch==2.13.0 resolves to the local CPU wheel (pip.conf's find-links); an unpinned torch would
	# pull CUDA.
	$(PIP_LOCKED) install torch==2.13.0 $(OR_LOCK_HINT)
	$(PYTHON) -c "$$LABEXTENSION_LINK" unlink
	$(PIP_LOCKED) install -e ".[test]" $(OR_LOCK_HINT)
	$(PYTHON) -c "$$LABEXTENSION_LINK" link
	# The browser of the end-to-end tests (tests/e2e), Debian's Chromium, and gdb for dump-stacks,
	# when we may install them.
	command -v chromium >/dev/null && command -v gdb >/dev/null || if [ "$$(id -u)" = 0 ]; then \
		apt-get update && apt-get install -y chromium gdb; \
		else echo "chromium or gdb is missing and we are not root: install them for the tests"; fi
	# The key as it is now that this checkout is the installed xlalab.
	touch .install-$$($(PY_KEY_COMMAND)).stamp

install: $(STAMP) $(EXT_BUILD)

# Re-resolve the lock to today's newest versions within pyproject.toml's ranges (pip-tools, added to
# PYTHON when missing; pip.conf's find-links still supply the CPU torch). Then run `make test`.
lock:
	$(PYTHON) -c "import piptools" 2>/dev/null || $(PIP) install pip-tools
	CUSTOM_COMPILE_COMMAND="make lock" $(PYTHON) -m piptools compile --upgrade --quiet \
		--extra test --all-build-deps --strip-extras --unsafe-package xlalab \
		--no-emit-index-url --no-emit-find-links --output-file $(LOCK) pyproject.toml

demo: install
	$(PYTHON) examples/mnist_train.py

# JupyterLab serves working copies of the example notebooks in .lab/examples (ignored by git), so
# what the lab saves (outputs, checkpoints) never touches the tracked examples/. A copy is
# refreshed when its tracked notebook is newer; the replaced copy, if it differed, is kept beside
# it as <name>.previous.ipynb.
LAB_DIR := .lab/examples
LAB_COPIES := $(patsubst examples/%,$(LAB_DIR)/%,$(wildcard examples/*.ipynb examples/*.py))

$(LAB_DIR)/%: examples/%
	@mkdir -p $(@D)
	@if [ -f $@ ] && ! cmp -s $< $@; then \
		case $@ in *.ipynb) keep=$(basename $@).previous.ipynb ;; *) keep=$@.previous ;; esac; \
		mv $@ "$$keep"; echo "$< changed: your copy of it is now $$keep"; fi
	cp $< $@

lab-notebooks: $(LAB_COPIES)

# JupyterLab on the example notebooks, with the XLA panel; e.g. LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
lab: install lab-notebooks
	# As root (containers, CI machines) JupyterLab refuses to start without --allow-root.
	$(PYTHON) -m jupyterlab --notebook-dir=$(LAB_DIR) $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS)

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
	$(PYTHON) bench/bench_spmd.py

# Generated programs, lazy against eager; e.g. FUZZ_ARGS="--programs 200 --seed 7".
FUZZ_ARGS ?= --programs 5000
fuzz: install
	$(PYTHON) -m xlalab.testing.fuzz $(FUZZ_ARGS)

clean:
	rm -rf .install*.stamp build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -rf xlalab/labextension $(EXT)/lib $(EXT)/tsconfig.tsbuildinfo

# Every OpInfo in PyTorch's op_db, lazy against eager (about 9 min on 2 cores): docs/op-coverage.md;
# every nn module in its module_db (under 2 min): docs/module-coverage.md.
.PHONY: coverage
coverage: install
	$(PYTHON) -m xlalab.testing.opinfo_sweep --out docs/op-coverage.md
	$(PYTHON) -m xlalab.testing.module_sweep --out docs/module-coverage.md
