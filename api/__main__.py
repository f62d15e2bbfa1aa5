"""`python -m lestrade.api`: serve the API on LESTRADE_API_HOST:LESTRADE_API_PORT."""

from __future__ import annotations

import os

import uvicorn
from kubernetes import config as k8s_config

from lestrade.config import api_bind

from .app import create_app


def main() -> None:
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ and not os.environ.get("KUBECONFIG")
    if in_cluster:
        k8s_config.load_incluster_config()
        from kubernetes import client as k8s

        api_client = k8s.ApiClient()
    else:
        api_client = k8s_config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
    host, port = api_bind(in_cluster=in_cluster)
    uvicorn.run(create_app(api_client), host=host, port=port, log_level="info")


if __name__ == "__main__":
    main()
