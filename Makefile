# Everything a fresh Debian 12 machine needs, installed only when missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Debian packages the test suite and demo use (installed by apt-get when absent): HAProxy 2.6 runs
# the load-balancer pools; nftables and iproute2 serve the egress gateway's kernel mode and the proxy's
# nftables mode (conntrack: its UDP flow clean-up); Playwright drives chromium in the web view's
# browser tests (Debian's build: never `playwright install`); bind9-dnsutils (`dig`) and curl are what
# the README's hands-on part asks the clusterset with.
APT_PACKAGES ?= haproxy nftables iproute2 conntrack chromium bind9-dnsutils curl busybox-static skopeo umoci docker-registry mmdebstrap runc gcc libc6-dev containernetworking-plugins

.PHONY: install demo test lint bench bench-quick clean apt image image-containerfile lock

# checkov scans the rendered manifests (tests/integration/test_checkov.py) from a venv of its own:
# its pins would downgrade the project's packaging and python-dateutil. The range is pyproject's
# `checkov` extra (kept for the record and for `pip install isthmus[checkov]` elsewhere).
CHECKOV_VENV := .venv-checkov
CHECKOV      := $(CHECKOV_VENV)/bin/checkov
# `apt` runs on every install: a package added after the venv was made is still installed.
install: $(STAMP) $(CHECKOV)
	@$(MAKE) --no-print-directory apt

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "apt-get install:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi
	@command -v kubectl >/dev/null || echo "warning: kubectl not found; e2e tests need it"

$(CHECKOV): pyproject.toml
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q "$$(sed -n 's/^checkov = \["\(checkov[^"]*\)"\].*/\1/p' pyproject.toml)"
	@touch $@

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

demo: install
	$(VENV)/bin/isthmus demo

# Tests mostly wait on sockets and subprocesses: four workers, one test file each (module fixtures).
# Tests that start a local clusterset run afterwards, one at a time (they share one 127.x plan).
test: install
	$(PY) -m pytest -q -n 4 --dist loadfile -m "not clusterset"
	$(PY) -m pytest -q -m clusterset

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

# The benchmarks compare against real peers (dnsperf drives both isthmus dns and NSD).
BENCH_APT_PACKAGES ?= dnsperf nsd

bench: install
	@$(MAKE) --no-print-directory apt APT_PACKAGES="$(BENCH_APT_PACKAGES)"
	$(PY) bench/apiserver.py
	$(PY) bench/runtime.py
	$(PY) bench/mcs.py
	$(PY) bench/mcs_allocator.py
	$(PY) bench/dns.py
	$(PY) bench/proxy.py
	$(PY) bench/proxy_splice.py
	$(PY) bench/lb.py
	$(PY) bench/mcsvc.py
	$(PY) bench/egress.py
	$(PY) bench/local.py

# Every benchmark at a smaller size, in under two minutes: to see a change's effect, not to quote.
bench-quick: install
	@$(MAKE) --no-print-directory apt APT_PACKAGES="$(BENCH_APT_PACKAGES)"
	$(PY) bench/apiserver.py --quick
	$(PY) bench/runtime.py --sizes 5000
	$(PY) bench/mcs.py --quick
	$(PY) bench/mcs_allocator.py --rounds 1
	$(PY) bench/dns.py --quick
	$(PY) bench/proxy.py --quick
	$(PY) bench/lb.py --quick
	$(PY) bench/mcsvc.py --services 50 --samples 10
	$(PY) bench/egress.py --quick

# The images, built here from Debian packages and PyPI only (no engine, no other registry): the Isthmus
# image (build/image/packages.txt + build/image/recipe.sh + requirements.lock) and busybox, nginx, pause
# and agnhost, as OCI layouts in $ISTHMUS_IMAGE_CACHE (default ~/.cache/isthmus/images), each with its
# digest, SBOM and oci-archive; unchanged inputs are not rebuilt. See docs/image.md.
image: install
	$(PY) -m isthmus.local.images.build

# The same Isthmus image from the Containerfile, which installs the same package list and runs the same
# recipe, by docker or podman (CONTAINER_ENGINE picks one; the first found otherwise), tagged with
# isthmus.api.image.IMAGE.
CONTAINER_ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
IMAGE = $(shell $(PY) -c 'from isthmus.api.image import IMAGE; print(IMAGE)')

image-containerfile: install
	@test -n "$(CONTAINER_ENGINE)" || { echo "make image-containerfile: neither docker nor podman is installed (or set CONTAINER_ENGINE)" >&2; exit 1; }
	$(CONTAINER_ENGINE) build -f Containerfile -t $(IMAGE) .

# requirements.lock: the runtime dependencies of pyproject.toml pinned, with every file's hash, from PyPI
# alone (pip's default index: the machine's pip configuration, local mirrors included, is left out).
# Run after changing [project].dependencies; a unit test fails while the lock no longer satisfies them.
lock: install
	env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
	  CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras \
	  --allow-unsafe --no-emit-index-url --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) build/lib build/bdist.* *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
