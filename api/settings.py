"""The API's settings: read from the environment once, here, and nowhere else.

Each router that has settings of its own defines their type beside its routes (`HostedSettings`,
`SlackSettings`, `AlertReceiverSettings`, `ToolsetSettings`), parsed from a mapping it is given;
`ApiSettings.from_env` gives them the environment, and `create_app` puts the result on
`app.state.settings` (and each router's part where the router looks for it).

| variable | default | meaning |
|---|---|---|
| `LESTRADE_API_HOST`, `LESTRADE_API_PORT` | 127.0.0.1 (0.0.0.0 in a cluster), 8080 | where the API listens |
| `LESTRADE_API_AUTH` | on in a cluster, off elsewhere | Kubernetes bearer tokens (or API keys) required |
| `LESTRADE_API_KEYS_DIR` | - | a folder of static API keys (a mounted Secret; file name = key name) |
| `LESTRADE_NAMESPACE` | `POD_NAMESPACE`, else the pod's, else `default` | where requests become resources |
| `LESTRADE_API_WAIT_TIMEOUT` | 3600 | seconds a non-streaming request waits for its run |
| `LESTRADE_DECISION_KEY_FILE` | - | the key that checks signed decision links (shared with the operator) |
| `LESTRADE_MODEL_LIST` | the demo model | the models a request may name (as the operator reads them) |
| `KUBECONFIG` | in-cluster config in a pod | the API's own Kubernetes credentials |

and those of the routers: hosted (`LESTRADE_ACCOUNT_ID`, `LESTRADE_CLUSTER_NAMES`), Slack
(`LESTRADE_SLACK_*`), the Alertmanager receiver (`LESTRADE_ALERT_ROUTES_*`), `/api/info`'s
toolsets (`LESTRADE_PROMETHEUS_URL`, `LESTRADE_ENABLE_BASH`, `LESTRADE_ENABLE_WRITE_TOOLS`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lestrade.api.alertmanager import AlertReceiverSettings
from lestrade.api.base.auth import auth_enabled, load_api_keys
from lestrade.api.holmes.routes_info import ToolsetSettings
from lestrade.api.hosted.accounts import HostedSettings
from lestrade.api.slack.routes import SlackSettings
from lestrade.config import ModelList, api_bind, load_model_list

__all__ = ["ApiSettings"]

_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _pod_namespace() -> str | None:
    try:
        return _NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class ApiSettings:
    """Everything the API process is configured with."""

    in_cluster: bool = False
    """Running in a pod without a KUBECONFIG: the pod's own service account is the API's identity."""
    kubeconfig: str | None = None
    """The API's own credentials outside a cluster."""
    host: str = "127.0.0.1"
    """Loopback outside a cluster: an API without authentication is not offered to the network."""
    port: int = 8080
    auth: bool = False
    """Every endpoint but the health checks needs a Kubernetes bearer token or an API key."""
    api_keys: Mapping[str, str] = field(default_factory=dict)
    """Static API keys (name -> key), accepted besides Kubernetes tokens."""
    namespace: str = "default"
    """Where requests become resources (and whose `create investigations` right the auth checks)."""
    wait_timeout: float = 3600.0
    """Seconds a non-streaming request waits for its run before answering what there is."""
    decision_key_file: str | None = None
    """The key that checks the operator's signed decision links."""
    models: ModelList | None = None
    """The names a request's `model` may use; None: loaded from LESTRADE_MODEL_LIST when the app is made."""
    hosted: HostedSettings = field(default_factory=HostedSettings)
    slack: SlackSettings = field(default_factory=SlackSettings)
    alerts: AlertReceiverSettings = field(default_factory=AlertReceiverSettings)
    toolsets: ToolsetSettings = field(default_factory=ToolsetSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = dict(os.environ if env is None else env)
        in_cluster = "KUBERNETES_SERVICE_HOST" in env and not env.get("KUBECONFIG")
        host, port = api_bind(env, in_cluster=in_cluster)
        return cls(
            in_cluster=in_cluster,
            kubeconfig=env.get("KUBECONFIG") or None,
            host=host,
            port=port,
            auth=auth_enabled(env, in_cluster=in_cluster),
            api_keys=load_api_keys(env),
            # POD_NAMESPACE: the chart's downward-API value (the same as the mounted token's)
            namespace=env.get("LESTRADE_NAMESPACE") or env.get("POD_NAMESPACE") or _pod_namespace() or "default",
            wait_timeout=float(env.get("LESTRADE_API_WAIT_TIMEOUT", "3600")),
            decision_key_file=env.get("LESTRADE_DECISION_KEY_FILE") or None,
            models=load_model_list(env=env),
            hosted=HostedSettings.from_env(env),
            slack=SlackSettings.from_env(env),
            alerts=AlertReceiverSettings.from_env(env),
            toolsets=ToolsetSettings.from_env(env),
        )
