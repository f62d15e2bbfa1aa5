"""`python -m lestrade.api`: serve the API on LESTRADE_API_HOST:LESTRADE_API_PORT."""

from __future__ import annotations

import logging
import os

import uvicorn
from kubernetes import config as k8s_config

from lestrade.api.app import create_app
from lestrade.api.base.auth import auth_enabled
from lestrade.config import api_bind


def main() -> None:
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ and not os.environ.get("KUBECONFIG")
    if in_cluster:
        k8s_config.load_incluster_config()
        from kubernetes import client as k8s

        api_client = k8s.ApiClient()
    else:
        api_client = k8s_config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
    host, port = api_bind(in_cluster=in_cluster)
    auth = auth_enabled(in_cluster=in_cluster)
    if not auth:
        logging.getLogger("lestrade.api").warning(
            "authentication is OFF (LESTRADE_API_AUTH=false, or not running in a cluster): anyone "
            "who can reach %s:%s can use the API with the API's own Kubernetes rights",
            host,
            port,
        )
    app = create_app(
        api_client,
        auth=auth,
        # POD_NAMESPACE: the chart's downward-API value (the same as the mounted token's namespace)
        namespace=(
            os.environ.get("LESTRADE_NAMESPACE") or os.environ.get("POD_NAMESPACE") or _pod_namespace() or "default"
        ),
        wait_timeout=float(os.environ.get("LESTRADE_API_WAIT_TIMEOUT", "3600")),
    )
    uvicorn.run(app, host=host, port=port, log_level="info")


def _pod_namespace() -> str | None:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    return open(path).read().strip() if os.path.exists(path) else None


if __name__ == "__main__":
    main()
