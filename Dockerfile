# The Lestrade image: operator, API and the Job-mode runner (same image, different command).
#
#   docker build -t ghcr.io/lestrade/lestrade:0.1.0 .
#
# kubectl (used by the bash toolset's read-only commands) is built from the same pinned Go
# modules as the local control plane, so the image needs nothing but PyPI and the Go proxy.
FROM golang:1.25-bookworm AS kubectl
RUN apt-get update && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY lestrade/localcluster/versions.py lestrade/localcluster/build.py ./lestrade/localcluster/
RUN touch lestrade/__init__.py lestrade/localcluster/__init__.py \
    && python3 -c "import sys; sys.path.insert(0, '.'); \
from lestrade.localcluster.build import build_only; \
print(build_only('kubernetes', ['kubectl'], '/out'))"

FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy \
    LITELLM_LOCAL_MODEL_COST_MAP=True PATH=/app/.venv/bin:$PATH
RUN pip install --no-cache-dir uv==0.13.9 && useradd --uid 10001 --create-home lestrade
WORKDIR /app
COPY pyproject.toml uv.lock setup.py README.md ./
COPY lestrade ./lestrade
COPY operator ./operator
COPY api ./api
RUN uv sync --frozen --no-dev --no-editable && rm -rf /root/.cache
COPY --from=kubectl /out/kubectl /usr/local/bin/kubectl
USER 10001
EXPOSE 8080
CMD ["python", "-m", "lestrade.operator"]
