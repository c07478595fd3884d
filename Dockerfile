# The operator image: kopf and the official Kubernetes client, no torch.
#   docker build -t pets-operator:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# Package indexes for an air-gapped build (hack/build_images.sh); empty means pip's default.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Every dependency from its lock (requirements/, `make locks`; docs/supply-chain.md): pip takes only
# files whose hash the lock lists, only wheels, and resolves nothing itself (--no-deps).
COPY requirements/operator.lock requirements/build.lock requirements/
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes --no-deps --only-binary=:all: -r requirements/operator.lock
# setuptools, locked too, to build the project's wheel: in a venv of this stage only, and used
# without build isolation (which would fetch an unpinned setuptools).
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --no-deps --only-binary=:all: -r requirements/build.lock
# README.m[d]: copied when present (the package metadata reads it).
COPY pyproject.toml README.m[d] ./
# The controller and the API package it shares with the trainer: not the SDK, not the local
# cluster (operator/pets_localkube/, the demo and the tests' emulated API server) and not the
# trainer; package discovery installs what is copied.
COPY operator/pets_api/ operator/pets_api/
COPY operator/pets_operator/ operator/pets_operator/
# What pets_api's manifests/ links point to (the CRD and the sample job, read as package data).
COPY manifests/crd.yaml manifests/job.yaml manifests/
# The project itself, without dependencies (all in the lock); `pip check` fails on one the lock lacks.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist . \
 && /opt/venv/bin/pip install --no-deps /tmp/dist/*.whl \
 && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
# The Deployment runs as 10001 with runAsNonRoot, which needs a numeric USER to verify.
RUN groupadd --system --gid 10001 pets \
 && useradd --system --uid 10001 --gid pets --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin pets
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080
CMD ["pets-operator", "run"]
