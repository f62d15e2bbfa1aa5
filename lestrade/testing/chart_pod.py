"""The chart's Deployment run as local processes: each container of the rendered pod becomes a
process with the container's command, args and environment, under the pod's ServiceAccount.

What a kubelet would do, done on this machine against the local control plane:
- the identity: a token minted (TokenRequest) for the pod's `serviceAccountName`, in a
  kubeconfig, so the processes have exactly the chart's RBAC and nothing more;
- the environment: `value`s as rendered, `fieldRef`s for the pod's name and namespace,
  `secretKeyRef`s read from the cluster;
- volumes: an emptyDir becomes a private folder, a Secret or ConfigMap volume its files, and a
  mount path named in an env value or an argument is rewritten to that folder;
- the network: every declared containerPort gets a free local port (one map for the whole pod,
  since containers of a pod share localhost), and `0.0.0.0` becomes `127.0.0.1`;
- readiness: the containers' own readinessProbes (httpGet), or a TCP connect to their ports.

The processes run this checkout's code, with the pinned build's kubectl (`binary_path`) first on
PATH; or, with `runner` (e.g. hack/image/verify.sh), the image's code, kubectl and environment:
the runner gets `VAR=value ...` and the container's command.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from lestrade.localcluster import binary_path
from lestrade.localcluster.cluster import free_port
from lestrade.localcluster.processes import ManagedProcess, wait_until

__all__ = ["ChartPod"]


@dataclass
class ChartPod:
    """One replica of a rendered Deployment, as processes. `start()`, then `stop()`."""

    deployment: dict[str, Any]
    cluster: Any  # LocalCluster | ExternalCluster: kubeconfig_for(), api_client()
    workdir: Path
    pod_name: str = "lestrade-local-0"
    ports: dict[int, int] = field(default_factory=dict)  # containerPort → local port
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    runner: list[str] | None = None  # runs a container's command in the image (see module doc)

    @property
    def namespace(self) -> str:
        return str(self.deployment["metadata"]["namespace"])

    @property
    def spec(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]["spec"]

    @property
    def service_account(self) -> str:
        return str(self.spec.get("serviceAccountName") or "default")

    def url(self, container_port: int, path: str = "") -> str:
        return f"http://127.0.0.1:{self.ports[container_port]}{path}"

    def container(self, name: str) -> dict[str, Any]:
        return next(c for c in self.spec["containers"] if c["name"] == name)

    def start(self, *, ready_timeout: float = 120) -> ChartPod:
        self.workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = _self_contained(
            self.cluster.kubeconfig_for(self.namespace, self.service_account, self.workdir / "kubeconfig")
        )
        for container in self.spec["containers"]:
            for port in container.get("ports", []):
                self.ports.setdefault(int(port["containerPort"]), free_port())
        volumes = self._materialize_volumes()
        bin_dir = self.workdir / "bin"
        bin_dir.mkdir(exist_ok=True)
        kubectl = bin_dir / "kubectl"
        if not kubectl.exists():
            kubectl.symlink_to(binary_path("kubectl"))
        if self.runner:
            self._own_volumes()
        for container in self.spec["containers"]:
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
            env = {"KUBECONFIG": str(kubeconfig)}
            for var in container.get("env", []):
                env[var["name"]] = self._rewrite(self._env_value(var), mounts)
            env.setdefault("TMPDIR", mounts.get("/tmp", str(self.workdir)))
            command = [self._rewrite(str(a), mounts) for a in [*container["command"], *container.get("args", [])]]
            if self.runner:
                command = [*self.runner, *(f"{k}={v}" for k, v in env.items()), *command]
                env = {**os.environ, "BIND_HOST_DIR": str(self.workdir)}
            else:
                env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
                if command[0] in ("python", "python3"):
                    command[0] = sys.executable
            process = ManagedProcess(
                f"{self.pod_name}/{container['name']}", command, self.workdir / f"{container['name']}.log", env=env
            )
            self.processes[container["name"]] = process.start()
        for container in self.spec["containers"]:
            wait_until(
                f"container {container['name']} of {self.pod_name} to be ready",
                lambda c=container: self._ready(c),
                ready_timeout,
                interval=0.2,
                watch=list(self.processes.values()),
            )
        return self

    def stop(self) -> None:
        """SIGTERM to every container (Kubernetes' graceful stop), SIGKILL after the pod's
        terminationGracePeriodSeconds."""
        grace = float(self.spec.get("terminationGracePeriodSeconds", 30))
        for process in self.processes.values():
            process.stop(timeout=grace)

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}:\n{p.log_tail(60)}" for p in self.processes.values())

    # -- the kubelet's parts -------------------------------------------------------------------

    def _env_value(self, var: dict[str, Any]) -> str:
        if "value" in var:
            return str(var["value"])
        source = var.get("valueFrom") or {}
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            known = {"metadata.name": self.pod_name, "metadata.namespace": self.namespace}
            if path not in known:
                raise ValueError(f"env {var['name']}: fieldRef {path} is not emulated")
            return known[path]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            return self._secret(ref["name"])[ref["key"]].decode()
        raise ValueError(f"env {var['name']}: {sorted(source)} is not emulated")

    def _secret(self, name: str) -> dict[str, bytes]:
        with self.cluster.api_client() as api:
            secret = k8s.CoreV1Api(api).read_namespaced_secret(name, self.namespace)
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def _configmap(self, name: str) -> dict[str, bytes]:
        with self.cluster.api_client() as api:
            cm = k8s.CoreV1Api(api).read_namespaced_config_map(name, self.namespace)
        return {k: v.encode() for k, v in (cm.data or {}).items()}

    def _materialize_volumes(self) -> dict[str, str]:
        folders: dict[str, str] = {}
        for volume in self.spec.get("volumes", []):
            folder = self.workdir / "volumes" / volume["name"]
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            if "secret" in volume:
                files = self._secret(volume["secret"]["secretName"])
                items = volume["secret"].get("items")
            elif "configMap" in volume:
                files = self._configmap(volume["configMap"]["name"])
                items = volume["configMap"].get("items")
            elif "emptyDir" in volume:
                files, items = {}, None
            else:
                raise ValueError(f"volume {volume['name']}: {sorted(volume)} is not emulated")
            for item in items or [{"key": k, "path": k} for k in files]:
                (folder / item["path"]).write_bytes(files[item["key"]])
            folders[volume["name"]] = str(folder)
        return folders

    def _own_volumes(self) -> None:
        """What the kubelet does for `fsGroup`: the pod's files belong to the pod's user/group
        (they are read by the image's non-root user)."""
        security = self.spec.get("securityContext") or {}
        uid, gid = int(security.get("runAsUser", 0)), int(security.get("fsGroup", security.get("runAsGroup", 0)))
        for path in [self.workdir, *self.workdir.rglob("*")]:
            os.chown(path, uid, gid, follow_symlinks=False)

    def _rewrite(self, value: str, mounts: dict[str, str]) -> str:
        value = value.replace("0.0.0.0", "127.0.0.1")
        if value.isdigit() and int(value) in self.ports:
            return str(self.ports[int(value)])
        for port, local in self.ports.items():
            value = re.sub(rf"(?<=:){port}(?=/|$)", str(local), value)
            value = re.sub(rf"^(--[a-z-]+=){port}$", rf"\g<1>{local}", value)
        for mount_path, folder in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                return folder + value[len(mount_path.rstrip("/")) :]
        return value

    def _ready(self, container: dict[str, Any]) -> bool:
        probe = (container.get("readinessProbe") or {}).get("httpGet")
        if probe:
            port = probe["port"]
            if isinstance(port, str):
                port = next(p["containerPort"] for p in container["ports"] if p.get("name") == port)
            with urllib.request.urlopen(self.url(int(port), probe.get("path", "/")), timeout=2) as response:
                return 200 <= response.status < 400
        return all(_connects(self.ports[int(p["containerPort"])]) for p in container.get("ports", []))


def _connects(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def _self_contained(kubeconfig: Path) -> Path:
    """The CA inlined, as in a pod's mounted service-account files: nothing outside the file."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config.get("clusters", []):
        ca = entry["cluster"].pop("certificate-authority", None)
        if ca:
            entry["cluster"]["certificate-authority-data"] = base64.b64encode(Path(ca).read_bytes()).decode()
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig
