"""`kubectl lestrade history`: past findings of the runs the kubeconfig's user may list, best
match first, with root cause and fix; hostile text shown inert; refused where RBAC says no."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from opkit import create_inv
from pluginkit import grant, run_plugin

from lestrade.resources import GROUP


def _finished(api_client: Any, namespace: str, name: str, title: str, cause: str, **spec: Any) -> None:
    create_inv(api_client, namespace, name, title=title, **spec)
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP,
        "v1alpha1",
        namespace,
        "investigations",
        name,
        {
            "status": {
                "phase": "Succeeded",
                "completionTime": "2026-11-20T10:00:00Z",
                "analysis": cause,
                "sections": {"Conclusions and Possible Root Causes": cause, "Next Steps": "raise the limit"},
            }
        },
    )


def test_history_finds_root_causes_as_the_user_may_read_them(
    namespace: str,
    api_client: Any,
    cluster: Any,
    crds: None,
) -> None:
    _finished(
        api_client,
        namespace,
        "oom-web",
        "web keeps restarting",
        "web is OOMKilled: 64Mi limit\x1b[31m",
        subject={"kind": "Deployment", "name": "web"},
    )
    _finished(api_client, namespace, "dns", "lookups fail", "coredns cannot reach its upstream")
    grant(api_client, namespace, "reader", [("investigations", ["list"]), ("conversations", ["list"])])
    reader = cluster.kubeconfig_for(namespace, "reader")

    found = run_plugin(reader, namespace, "history", "OOMKilled", "memory")
    assert found.code == 0, found.err
    first = found.out.splitlines()[0]
    assert first.startswith("inv/oom-web  Succeeded") and "web keeps restarting" in first, found.out
    assert "root cause: web is OOMKilled: 64Mi limit\\x1b[31m" in found.out  # escaped, not sent to the terminal
    assert "fix: suggested: raise the limit" in found.out and "dns" not in found.out

    by_resource = run_plugin(reader, namespace, "history", "--kind", "deployment", "--resource", "web", "-o", "json")
    assert [r["name"] for r in json.loads(by_resource.out)] == ["oom-web"], by_resource.err
    assert run_plugin(reader, namespace, "history", "--since", "yesterday").code != 0

    everywhere = run_plugin(reader, namespace, "history", "-A", "OOMKilled")
    assert everywhere.code == 5 and "forbidden" in everywhere.err.lower(), everywhere  # refused by the cluster

    grant(api_client, namespace, "inv-reader", [("investigations", ["list"])])
    partial = run_plugin(cluster.kubeconfig_for(namespace, "inv-reader"), namespace, "history", "OOMKilled")
    assert partial.code == 0 and partial.out.startswith("inv/oom-web"), partial
    assert "may not list conversations" in partial.err
