# Everything the project needs is installed by these targets, on a fresh machine too.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
STAMP := .install.stamp

.PHONY: install demo lab test lint bench clean

$(STAMP): pyproject.toml
	# torch==2.13.0 resolves to the local CPU wheel; an unpinned torch would pull CUDA.
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# Until the JupyterLab extension lands, the demo stands in for `make lab`.
demo: install
	$(PYTHON) examples/mnist_train.py

lab: demo

test: install
	$(PYTHON) -m ruff check xlalab tests bench examples
	$(PYTHON) -m mypy xlalab
	$(PYTHON) -m pytest -q --timeout=900 tests

lint: install
	$(PYTHON) -m ruff check xlalab tests bench examples
	$(PYTHON) -m mypy xlalab

bench: install
	$(PYTHON) bench/bench_step.py

clean:
	rm -rf $(STAMP) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

# Every OpInfo in PyTorch's op_db, lazy against eager (20-40 min on 2 cores): docs/op-coverage.md.
.PHONY: coverage
coverage: install
	$(PYTHON) -m xlalab.testing.opinfo_sweep --out docs/op-coverage.md
