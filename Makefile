# The two commands: `make run` and `make test`. Everything else is a step they take.
SHELL := /bin/bash
UV_VERSION := 0.13.9
TOOLS := .lestrade/tools
UV := $(TOOLS)/bin/uv
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: run test eval bench deps binaries all-binaries browser crds crds-check clean image e2e-kind

# The image `make image` builds and `make e2e-kind` loads: the chart's appVersion by default.
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/lestrade/Chart.yaml)
IMAGE ?= ghcr.io/lestrade/lestrade:$(APP_VERSION)

run: deps binaries ## local control plane (or LESTRADE_CLUSTER=current), CRDs, operator, API
	$(PY) -m lestrade.cli run

test: deps binaries browser ## the whole suite against the real control plane (builds the test-only tools it needs first)
	$(PY) -m pytest $(PYTEST_ARGS)

# The investigation scenarios (eval/scenarios). Without MODEL: the scripted investigator follows
# each reference plan (no model needed; also part of `make test`, tests/evals/test_eval_suite.py)
# and the last line is `evidence recall: N/M (P%)`. MODEL=<modelList entry>: the model
# investigates freely and a judge (JUDGE=, default the same model) scores it; EVAL_ARGS=
# adds options (--only a,b  --report DIR  --compare old.json).
MODEL ?=
JUDGE ?=
EVAL_ARGS ?=
eval: deps binaries ## the scenario suite: evidence recall (scripted), or MODEL=<name> judged
	$(PY) -m lestrade.localcluster build prometheus
	$(PY) -m lestrade.evals $(if $(MODEL),--model $(MODEL)) $(if $(JUDGE),--judge $(JUDGE)) $(EVAL_ARGS)

bench: deps binaries ## benchmarks: print numbers
	@for b in bench/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

deps: .venv/.synced

$(UV):
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q uv==$(UV_VERSION)

# --compile-bytecode: with PYTHONDONTWRITEBYTECODE set (as on the development machines) nothing
# is ever cached, and each process compiled litellm's 2,500 modules from source again: 7 s of
# CPU instead of 3 s before a restarted operator's first model call (issue #28). The image
# compiles them at build time too.
.venv/.synced: $(UV) pyproject.toml uv.lock setup.py
	$(UV) sync --frozen --compile-bytecode
	touch $@

binaries: deps ## build the control plane `make run` starts (Kubernetes, etcd, KWOK) from Go modules (cached)
	$(PY) -m lestrade.localcluster build

# Helm, kubeconform and Prometheus are built by the tests that use them, when collected
# (lestrade/testing/binaries.py); this builds every pinned component at once.
all-binaries: deps
	$(PY) -m lestrade.localcluster build --all

browser: ## Debian's chromium for the web console's browser tests (Playwright drives it; no download)
	@test -x /usr/bin/chromium || { \
		echo "installing chromium (apt-get) for the console's browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }

crds: deps ## regenerate crds/ and the chart's CRDs from the pydantic models
	$(PY) -m lestrade.resources.generate

crds-check: deps
	$(PY) -m lestrade.resources.generate --check

image: ## the container image (docker, or buildah/podman without a daemon); see Dockerfile
	IMAGE=$(IMAGE) hack/image/build.sh

e2e-kind: deps binaries ## a kind cluster, the image loaded, the chart installed, e2e/ against it
	IMAGE=$(IMAGE) PY=$(PY) e2e/kind/run.sh

clean:
	rm -rf .venv .lestrade
