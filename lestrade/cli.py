"""`lestrade run`: the whole product on this machine, in the foreground, until Ctrl-C.

Brings up the local control plane (or uses the current kubeconfig's cluster when
`LESTRADE_CLUSTER=current`), installs the CRDs, starts the demo model when no model list is
configured, then runs the operator and the API as child processes. Every child is stopped on
Ctrl-C, on SIGTERM, and when any of them dies, so nothing is left behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

from lestrade.config import api_bind
from lestrade.localcluster import BuildError, LocalCluster, StartupError, binary_path
from lestrade.localcluster.cluster import free_port, http_ok
from lestrade.localcluster.kubectl_cache import forget_discovery
from lestrade.localcluster.processes import ManagedProcess, wait_until
from lestrade.localcluster.toolsaccount import ensure_scope_policy, ensure_tenancy, ensure_tools_account
from lestrade.localcluster.versions import KUBERNETES_VERSION

__all__ = ["main"]

STATE_DIR = Path(".lestrade")


def _current_kubeconfig() -> Path:
    path = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
    if not path.exists():
        raise StartupError(f"LESTRADE_CLUSTER=current but there is no kubeconfig at {path}")
    return path


def _python(module: str, log: Path, env: dict[str, str], *args: str) -> ManagedProcess:
    return ManagedProcess(module, [sys.executable, "-m", module, *args], log, env=env).start()


def _apiserver_port(env: dict[str, str]) -> int | None:
    """`LESTRADE_APISERVER_PORT`, else 6443 when free (a kubeconfig that stays the same from one
    run to the next), else None: any free port."""
    if env.get("LESTRADE_APISERVER_PORT"):
        return int(env["LESTRADE_APISERVER_PORT"])
    return _port_if_free(6443)


def _port_if_free(preferred: int) -> int | None:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            return None
    return preferred


def _link_kubectl(state_dir: Path) -> Path:
    """`.lestrade/bin/kubectl` → the kubectl built with the control plane (a newcomer may have none)."""
    bin_dir = (state_dir / "bin").resolve()
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "kubectl"
    link.unlink(missing_ok=True)
    link.symlink_to(binary_path("kubectl"))
    # `kubectl lestrade`: kubectl runs any `kubectl-<name>` on PATH as a plugin.
    plugin = bin_dir / "kubectl-lestrade"
    plugin.unlink(missing_ok=True)
    plugin.write_text(f'#!/bin/sh\nexec {sys.executable} -m lestrade.plugin "$@"\n')
    plugin.chmod(0o755)
    return bin_dir


def _accepts_an_investigation(custom: Any, *, stamped: bool) -> bool:
    """A dry-run create of an Investigation, through every admission step a user's create takes
    (`custom`: a `CustomObjectsApi` as the local admin).

    The operator installs the requester policy as it starts; until the apiserver has loaded it
    (and the CRD's schema it applies to), a create either fails with "Resource kind ... not
    found" (ServiceUnavailable) or is not stamped with its creator. Neither is a ready cluster:
    the newcomer's first `kubectl apply` would meet it. `stamped`: the local control plane has
    the policy's beta API on; a current cluster may not (the validating policy then suffices)."""
    from lestrade.resources import API_VERSION, GROUP, INVESTIGATION_KIND, INVESTIGATION_PLURAL, VERSION
    from lestrade.resources.keys import REQUESTED_BY_ANNOTATION

    body = {
        "apiVersion": API_VERSION,
        "kind": INVESTIGATION_KIND,
        "metadata": {"generateName": "lestrade-ready-probe-"},
        "spec": {"title": "readiness probe of lestrade run (dry run, never stored)"},
    }
    created = cast(
        dict[str, Any],
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", INVESTIGATION_PLURAL, body, dry_run="All"),
    )
    return not stamped or REQUESTED_BY_ANNOTATION in (created.get("metadata", {}).get("annotations") or {})


def _install_crds(cluster: LocalCluster) -> None:
    from lestrade.resources.install import install_crds

    with cluster.api_client() as api:
        install_crds(api, wait=True, timeout=60)


def run(state_dir: Path = STATE_DIR) -> int:
    state_dir.mkdir(exist_ok=True)
    logs = (state_dir / "logs").resolve()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    cluster: LocalCluster | None = None
    children: list[ManagedProcess] = []
    try:
        started = time.monotonic()
        if os.environ.get("LESTRADE_CLUSTER") == "current":
            kubeconfig = _current_kubeconfig()
            print(f"lestrade: using the current cluster from {kubeconfig}")
        else:
            kubeconfig = (state_dir / "kubeconfig").resolve()
            print("lestrade: starting the local control plane ...", flush=True)
            cluster = LocalCluster.start(
                kubeconfig=kubeconfig,
                api_port=_apiserver_port(dict(os.environ)),
                # Before the controllers, as in a cluster the chart was installed in long ago:
                # the garbage collector watches the kinds that own transcripts from its start.
                before_controllers=_install_crds,
            )
            print(f"lestrade: control plane up in {time.monotonic() - started:.1f}s at {cluster.server}")

        from kubernetes import config as k8s_config

        from lestrade.resources.install import install_crds

        with k8s_config.new_client_from_config(config_file=str(kubeconfig)) as api:
            if cluster is None:  # a local control plane got them before its controllers
                install_crds(api, wait=True, timeout=60)
            server = api.configuration.host
            # The tools act as this read-only account, never with the admin kubeconfig.
            tools_account = ensure_tools_account(api)
            # Tenant isolation as the chart sets it up; the local admin (system:masters) is
            # granted the whole cluster, any other identity's runs read their own namespace.
            scopes_namespace = ensure_tenancy(api)
            scope_policy = ensure_scope_policy(api, [{"groups": ["system:masters"], "namespaces": ["*"]}])
        print(
            "lestrade: CRDs installed (kubectl get crd: investigations, conversations, mcpservers, ... .lestrade.dev)"
        )
        print(f"lestrade: tools act as the read-only ServiceAccount {tools_account}")
        # kubectl would otherwise trust a discovery cache of an earlier cluster on this host:port.
        for folder in forget_discovery(server):
            print(f"lestrade: removed kubectl's stale discovery cache {folder}")

        bin_dir = _link_kubectl(state_dir)
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "LESTRADE_TOOLS_SERVICE_ACCOUNT": tools_account,
            "LESTRADE_SCOPES_NAMESPACE": scopes_namespace,
            "LESTRADE_SCOPE_POLICY": scope_policy,
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "/usr/bin:/bin")]),
        }
        if not env.get("LESTRADE_MODEL_LIST"):
            port = free_port()
            env["LESTRADE_DEMO_MODEL_URL"] = f"http://127.0.0.1:{port}/v1"
            demo = ManagedProcess(
                "demo-model",
                [sys.executable, "-m", "lestrade.modelserver", "--port", str(port)],
                logs / "demo-model.log",
                env=env,
            ).start()
            children.append(demo)
            wait_until("the demo model", lambda: http_ok(f"http://127.0.0.1:{port}/v1/models"), 30, watch=[demo])
            print(
                "lestrade: no LESTRADE_MODEL_LIST set: using the built-in DEMO model (scripted answers, not a real LLM)"
            )

        # Its health endpoint answers once its model client is warm (operator/readiness.py):
        # "Lestrade is running" then means the first chat pays only the model's own time.
        operator_health = f"http://127.0.0.1:{free_port()}/healthz"
        children.append(_python("lestrade.operator", logs / "operator.log", env, "--liveness", operator_health))
        children.append(_python("lestrade.api", logs / "api.log", env))
        host, port = api_bind(env)
        wait_until("the API /readyz", lambda: http_ok(f"http://{host}:{port}/readyz"), 60, watch=children)
        wait_until("the operator ready for work", lambda: http_ok(operator_health), 300, watch=children)
        from kubernetes import client as k8s_client

        with k8s_config.new_client_from_config(config_file=str(kubeconfig)) as api:  # one client for every poll
            custom = k8s_client.CustomObjectsApi(api)
            wait_until(
                "the cluster to accept an Investigation and record who asked",
                lambda: _accepts_an_investigation(custom, stamped=cluster is not None),
                60,
                watch=children,
            )
        print(
            f"""
Lestrade is running (Ctrl-C stops everything).
  API:        http://{host}:{port}   (curl http://{host}:{port}/readyz)
  kubeconfig: export KUBECONFIG={kubeconfig}
  kubectl:    export PATH={bin_dir}:$PATH   (the kubectl {KUBERNETES_VERSION} built for this cluster)
  try:        kubectl apply -f examples/crashloop.yaml && kubectl lestrade follow inventory-api-crashloop
  console:    http://{host}:{port}/
  logs:       {logs}/
""",
            flush=True,
        )
        while not stop.wait(0.5):
            for child in children:
                child.check_alive()
        print("\nlestrade: stopping ...", flush=True)
        return 0
    except (BuildError, StartupError) as exc:
        print(f"lestrade: error: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(children):
            child.stop()
        if cluster is not None:
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lestrade")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="control plane (or LESTRADE_CLUSTER=current), operator and API")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run()
    return 2


if __name__ == "__main__":
    sys.exit(main())
