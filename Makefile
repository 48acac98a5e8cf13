# The two commands of the README: `make demo` (set up, run the main job on the embedded stack) and `make test`.
# Both work on a fresh Debian machine: they create the venv and install what is missing.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup system demo test lint unit integration bench faults clean image compose-secrets compose-up compose-down

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot]'
	touch $(STAMP)

setup: $(STAMP)
	@# editable installs are not byte-compiled by pip and this machine's environment may set
	@# PYTHONDONTWRITEBYTECODE: without .pyc files every `eru` start compiles ~40 modules (docs/cli.md, "Fast start")
	$(PY) -m compileall -q -j0 libs services > /dev/null

# Debian packages the tests use (Docker engine, static busybox for the test image, docker-compose for the compose
# stack, debootstrap for the image's base, chromium + chromium-driver for the web console's browser tests); only attempted as root, skipped when
# already present.
system:
	bash scripts/install-system-packages.sh

demo: setup
	$(VENV)/bin/eru demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy libs services

test: setup system
	bash scripts/start-dockerd.sh || echo "WARNING: no Docker engine: the docker-marked tests will be skipped (loudly)"
	$(MAKE) lint
	@# two workers (pytest-xdist): the tests that share a stack, a browser or the Docker engine stay on one worker
	@# (docs/testing.md "Parallel runs")
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup

unit: setup
	$(VENV)/bin/pytest -q tests/unit

# The headline figures (bench/README.md, docs/performance.md): `make bench QUICK=1` runs the ten-minute version.
bench: setup
	mkdir -p bench/out
	$(PY) -m bench report $(if $(QUICK),--quick,) | tee bench/out/report.txt

# The fault suite (docs/reliability.md): its own stack, kills and outages during bursts, fuzzing, permission probes.
# `make faults SHORT=1` runs the reduced version CI runs.
faults: setup
	$(PY) -m bench.faults $(if $(SHORT),--short,)

# The image and the compose stack (docs/deploy.md). `make image` pulls no image: its base is a debootstrapped Debian
# imported once (reused after); `make image BASE=python:3.11-slim` where a registry is reachable.
image:
	BASE=$(BASE) bash scripts/build-image.sh

compose-secrets: setup
	$(PY) -P -m eru.compose secrets --dir $${ERU_COMPOSE_DIR:-.compose}

compose-up: compose-secrets
	docker image inspect $${ERU_COMPOSE_IMAGE:-eru:latest} >/dev/null 2>&1 || $(MAKE) image
	bash scripts/compose.sh up

compose-down:
	bash scripts/compose.sh down

clean:
	rm -rf .state bench/out .pytest_cache .mypy_cache .ruff_cache .hypothesis
