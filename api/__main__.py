"""`python -m lestrade.api`: serve the API on LESTRADE_API_HOST:LESTRADE_API_PORT."""

from __future__ import annotations

import logging

import uvicorn
from kubernetes import config as k8s_config

from lestrade.api.app import create_app
from lestrade.api.settings import ApiSettings


def main() -> None:
    settings = ApiSettings.from_env()
    if settings.in_cluster:
        k8s_config.load_incluster_config()
        from kubernetes import client as k8s

        api_client = k8s.ApiClient()
    else:
        api_client = k8s_config.new_client_from_config(config_file=settings.kubeconfig)
    if not settings.auth:
        logging.getLogger("lestrade.api").warning(
            "authentication is OFF (LESTRADE_API_AUTH=false, or not running in a cluster): anyone "
            "who can reach %s:%s can use the API with the API's own Kubernetes rights",
            settings.host,
            settings.port,
        )
    uvicorn.run(create_app(api_client, settings=settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
