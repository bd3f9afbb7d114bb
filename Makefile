# make run   the default job: six CPU environments on the quick grid, in two rounds, then the summary
# make test  the test suite: the kit's logic and one end-to-end check of each guarantee, on two workers
# make test-full  the exhaustive suite: also every catalogue model in every environment, on two workers
# make test-as-slowest  make test as on the slowest machine type, on a faster one: one core, AVX2 code paths only
# make test-gpu   the tests marked gpu, on a machine with a CUDA GPU (each skipped with the reason without one; one line
#                 and exit status 2 where nvidia-smi finds a GPU that PyTorch cannot use; each GPU environment's missing
#                 package named with its pip line), each environment in a process of its own
# make lab   JupyterLab on notebooks/, with a kernel that has the kit installed
# make docs  the documentation site, built from docs/ (and the code, for its reference pages) into site/
# make engines  the Python environments of the serving engines that run in one of their own (cpu-vllm: minutes), under the build cache
# Each creates .venv with python3 if it is missing and installs the kit into it with every extra,
# each backend's, the cluster's and the documentation's: .[all,docs,test] (again only when pyproject.toml changes).
# Extra arguments: make run ARGS="--grid smoke", make test ARGS="-x".
# The tests run on TEST_WORKERS pytest-xdist workers (tests/conftest.py says how they share the machine);
# TEST_WORKERS=0 runs them in this process, one after the other. `make test` writes each test's and fixture's time to
# .test-times/<date>-<time>.json; `.venv/bin/python benchmarks/suite_time.py report` says where the time went.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
TEST_WORKERS ?= 2
TEST_TIMES := .test-times/$(shell date +%Y%m%d-%H%M%S).json
BROWSER := /usr/bin/chromedriver
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# The slowest type seen is a 2-core AMD EPYC with AVX2 only, whose cores do about half the work of a recent one's: one
# worker on one core of a faster CPU (its two workers' work, one after the other), with PyTorch's kernels (and
# inductor's) and XLA held to AVX2, comes near it. oneDNN's own cap (ONEDNN_MAX_CPU_ISA=AVX2) is
# left out: OpenVINO's int8 kernels crash under it on an AVX-512 CPU, which no AVX2 machine does.
# Inductor's kernels get a folder of their own: with torch's default (/tmp/torchinductor_<user>, holding this machine's
# AVX-512 builds), a GPT-2 compiled in the pytest process itself gave NaN under the cap; with a fresh one it agrees.
AS_SLOWEST := ATEN_CPU_CAPABILITY=avx2 XLA_FLAGS=--xla_cpu_max_isa=AVX2 TORCHINDUCTOR_CACHE_DIR=$$(mktemp -d) taskset -c 0

.PHONY: run test test-full test-as-slowest test-gpu lab docs install engines

run: $(INSTALLED)
	$(PY) -m benchlib run $(ARGS)

test: $(INSTALLED) $(BROWSER)
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=10 --test-times=$(TEST_TIMES) $(ARGS)

test-as-slowest: $(INSTALLED) $(BROWSER)
	$(AS_SLOWEST) $(PY) -m pytest -n 1 --durations=10 --test-times=$(TEST_TIMES) $(ARGS)

test-full: $(INSTALLED) $(BROWSER)
	$(PY) -m pytest -n $(TEST_WORKERS) --full $(ARGS)

test-gpu: $(INSTALLED)
	$(PY) tests/gpu/preflight.py
	$(PY) -m pytest -m gpu $(ARGS)

lab: $(INSTALLED)
	$(PY) -m benchlib lab $(ARGS)

docs: $(INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

install: $(INSTALLED)

engines: $(INSTALLED)
	$(PY) -m benchlib engines install $(ARGS)

# The browser test opens the kit's pages in Debian's headless Chromium through its driver: installed when missing
# (as root, or with sudo; the package lists refreshed if the first try fails). Where neither works, the tests still run
# and the browser test says what to install.
$(BROWSER):
	-$(SUDO) apt-get install -y chromium chromium-driver || ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver)

$(PY):
	$(PYTHON) -m venv $(VENV)

# The kernel spec goes into the environment itself (--sys-prefix), so JupyterLab and
# papermill start kernels with this environment's python.
$(INSTALLED): pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[all,docs,test]'
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (benchlib)"
	touch $@
