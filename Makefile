# make run   the default job: six CPU environments on the quick grid, in two rounds, then the summary
# make test  the test suite: the kit's logic and one end-to-end check of each guarantee, on two workers
# make test-full  the exhaustive suite: also every catalogue model in every environment, on two workers
# make lab   JupyterLab on notebooks/, with a kernel that has the kit installed
# Each creates .venv with python3 if it is missing and installs the kit into it with every extra,
# each backend's and the cluster's: .[all,test] (again only when pyproject.toml changes).
# Extra arguments: make run ARGS="--grid smoke", make test ARGS="-x".
# The tests run on TEST_WORKERS pytest-xdist workers (tests/conftest.py says how they share the machine);
# TEST_WORKERS=0 runs them in this process, one after the other.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
TEST_WORKERS ?= 2

.PHONY: run test test-full lab install

run: $(INSTALLED)
	$(PY) -m benchlib run $(ARGS)

test: $(INSTALLED)
	$(PY) -m pytest -n $(TEST_WORKERS) $(ARGS)

test-full: $(INSTALLED)
	$(PY) -m pytest -n $(TEST_WORKERS) --full $(ARGS)

lab: $(INSTALLED)
	$(PY) -m benchlib lab $(ARGS)

install: $(INSTALLED)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The kernel spec goes into the environment itself (--sys-prefix), so JupyterLab and
# papermill start kernels with this environment's python.
$(INSTALLED): pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[all,test]'
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (benchlib)"
	touch $@
