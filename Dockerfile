# The Lestrade image: operator, API, the Job-mode runner and the demo model server (same image,
# different command). `make image` builds it (docker, or buildah/podman without a daemon).
#
# Stages:
#   kubectl  the bash toolset's kubectl, built from the same pinned Go modules as the local
#            control plane (lestrade/localcluster/versions.py, build_only) - no download of a
#            prebuilt binary.
#   venv     the Python environment: exactly uv.lock (`uv sync --frozen`), no dev group, the
#            project installed as a wheel (not editable), bytecode compiled at build time.
#   final    the same Python base, the venv and kubectl; no compiler, no uv, no pip run;
#            non-root (10001); works with a read-only root filesystem (writes go to /tmp,
#            an emptyDir in the chart).
#
# The bases are pinned by digest (the tag says which release the digest is). Refresh both with
#   skopeo inspect --format '{{.Digest}}' docker://docker.io/library/python:3.11-slim-bookworm
# (tests/image/test_dockerfile.py keeps these rules).
ARG PYTHON_BASE=docker.io/library/python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
ARG GO_BASE=docker.io/library/golang:1.25-bookworm@sha256:3b4a11519ad929d1e1d261a12cff056f0c85b735253d7d861346b9c6f8b36437

FROM ${GO_BASE} AS kubectl
# One module cache path, so a builder may mount a warm one there (hack/image/build.sh does).
ENV GOMODCACHE=/go-mod-cache
# build.py is plain Python: the Go image may lack python3 (the official one does).
RUN command -v python3 >/dev/null || { apt-get update \
      && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*; }
WORKDIR /src
COPY lestrade/localcluster/versions.py lestrade/localcluster/build.py ./lestrade/localcluster/
RUN touch lestrade/__init__.py lestrade/localcluster/__init__.py \
    && python3 -c "import sys; sys.path.insert(0, '.'); \
from lestrade.localcluster.build import build_only; \
print(build_only('kubernetes', ['kubectl'], '/out'))" \
    && /out/kubectl version --client

FROM ${PYTHON_BASE} AS venv
# UV_PYTHON_DOWNLOADS=never: the venv must use the base's interpreter, the one the final stage has.
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/app/.venv UV_NO_CACHE=1
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir uv==0.13.9
WORKDIR /src
# The locked dependencies first (a layer that survives source edits), then the project.
COPY pyproject.toml uv.lock setup.py README.md ./
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-install-project --python python3
COPY lestrade ./lestrade
COPY operator ./operator
COPY api ./api
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-editable --python python3

FROM ${PYTHON_BASE}
ENV PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp \
    LITELLM_LOCAL_MODEL_COST_MAP=True
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin lestrade
COPY --from=venv /app/.venv /app/.venv
COPY --from=kubectl /out/kubectl /usr/local/bin/kubectl
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
CMD ["python", "-m", "lestrade.operator"]
