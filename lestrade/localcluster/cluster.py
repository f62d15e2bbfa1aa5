"""A real Kubernetes control plane on this machine: etcd, kube-apiserver, controller-manager,
scheduler and KWOK, served like a real cluster (TLS, RBAC, service-account tokens).

KWOK plays the kubelets: it keeps simulated Nodes ready, moves scheduled Pods to Running (or to
CrashLoopBackOff, see `stages.yaml`), and serves pod logs that a test describes with a KWOK
`Logs` object pointing at a local file, or that a pod declares in annotations (`simlogs.py`). Everything lives in one temp dir that `stop()` removes.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from lestrade.localcluster.build import ensure_binaries
from lestrade.localcluster.kubeconfig import write_kubeconfig
from lestrade.localcluster.pki import ClusterPKI, create_pki
from lestrade.localcluster.processes import ManagedProcess, StartupError, wait_until
from lestrade.localcluster.serviceaccounts import ServiceAccountTokens
from lestrade.localcluster.simlogs import LogSimulator
from lestrade.resources.keys import SIMULATE_ANNOTATION

__all__ = ["LocalCluster", "ExternalCluster", "StartupError", "KWOK_NODE_ANNOTATION"]

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.1.0.0/16"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _https_ok(url: str, pki: ClusterPKI) -> bool:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
    with urllib.request.urlopen(url, context=context, timeout=2) as response:
        return response.status == 200


def http_ok(url: str) -> bool:
    """True when `url` answers 200 (raises while the server is not up yet)."""
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status == 200


@dataclass
class LocalCluster(ServiceAccountTokens):
    """A running local control plane. Use `LocalCluster.start()`; `stop()` when done."""

    data_dir: Path
    kubeconfig: Path
    server: str
    ca_file: Path
    nodes: list[str]
    processes: list[ManagedProcess] = field(default_factory=list)
    owns_data_dir: bool = True
    log_simulator: LogSimulator | None = None

    @classmethod
    def start(cls, data_dir: Path | None = None, **kwargs: object) -> LocalCluster:
        """Starts a control plane; retried when a free port was taken before a process bound it."""
        for attempt in range(3):
            if attempt and data_dir is not None:  # stop() keeps a dir it did not create
                shutil.rmtree(data_dir, ignore_errors=True)
            try:
                return cls._start(data_dir, **kwargs)  # type: ignore[arg-type]
            except StartupError as exc:
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _start(
        cls,
        data_dir: Path | None = None,
        *,
        nodes: int = 2,
        kubeconfig: Path | None = None,
        api_port: int | None = None,
        timeout: float = 90.0,
        before_controllers: Callable[[LocalCluster], None] | None = None,
    ) -> LocalCluster:
        bins = ensure_binaries(["kubernetes", "etcd", "kwok"])
        owns = data_dir is None
        data_dir = Path(data_dir or tempfile.mkdtemp(prefix="lestrade-cluster-"))
        data_dir.mkdir(parents=True, exist_ok=True)
        pki = create_pki(data_dir / "pki")
        logs = data_dir / "logs"
        api_port = api_port or free_port()
        server = f"https://127.0.0.1:{api_port}"
        admin_kubeconfig = write_kubeconfig(
            kubeconfig or data_dir / "admin.kubeconfig",
            server=server,
            ca_file=pki.ca.cert,
            user="lestrade-admin",
            client_cert=pki.admin.cert,
            client_key=pki.admin.key,
        )
        cluster = cls(
            data_dir=data_dir,
            kubeconfig=admin_kubeconfig,
            server=server,
            ca_file=pki.ca.cert,
            nodes=[f"kwok-node-{i}" for i in range(nodes)],
            owns_data_dir=owns,
        )
        try:
            cluster._start_etcd_and_apiserver(bins, pki, logs, api_port, timeout)
            if before_controllers is not None:
                # E.g. CRDs: the garbage collector looks for new kinds only every 30 s; until it
                # watches a kind, every object owned by one (a run's transcript ConfigMaps) makes
                # it GET the owner again and again.
                before_controllers(cluster)
            cluster._start_controllers(bins, pki, logs, timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start_etcd_and_apiserver(
        self, bins: dict[str, Path], pki: ClusterPKI, logs: Path, api_port: int, timeout: float
    ) -> None:
        etcd_port, peer_port = free_port(), free_port()
        etcd = ManagedProcess(
            "etcd",
            [
                str(bins["etcd"]),
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # a throwaway cluster: durability is not worth the latency
                "--log-level=warn",
            ],
            logs / "etcd.log",
        ).start()
        self.processes.append(etcd)
        wait_until("etcd", lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"), timeout, watch=[etcd])

        apiserver = ManagedProcess(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={self.data_dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={pki.kubelet_client.cert}",
                f"--kubelet-client-key={pki.kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
                "--profiling=false",
                # MutatingAdmissionPolicy (beta in 1.35, off by default) records who created each
                # Investigation/Conversation (lestrade.operator.admission.requester).
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
                "--v=0",
            ],
            logs / "kube-apiserver.log",
        ).start()
        self.processes.append(apiserver)
        wait_until(
            "kube-apiserver /readyz", lambda: _https_ok(f"{self.server}/readyz", pki), timeout, watch=[etcd, apiserver]
        )

    def _component_kubeconfig(self, pki: ClusterPKI, name: str, pair_name: str) -> Path:
        pair = getattr(pki, pair_name)
        return write_kubeconfig(
            self.data_dir / f"{name}.kubeconfig",
            server=self.server,
            ca_file=pki.ca.cert,
            user=name,
            client_cert=pair.cert,
            client_key=pair.key,
        )

    def _start_controllers(self, bins: dict[str, Path], pki: ClusterPKI, logs: Path, timeout: float) -> None:
        cm_config = self._component_kubeconfig(pki, "kube-controller-manager", "controller_manager")
        self.processes.append(
            ManagedProcess(
                "kube-controller-manager",
                [
                    str(bins["kube-controller-manager"]),
                    f"--kubeconfig={cm_config}",
                    f"--service-account-private-key-file={pki.sa_key}",
                    f"--root-ca-file={pki.ca.cert}",
                    "--use-service-account-credentials=true",
                    f"--cluster-signing-cert-file={pki.ca.cert}",
                    f"--cluster-signing-key-file={pki.ca.key}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    # No metrics API here, so the HPA controller could only overwrite every HPA's status
                    # with "failed to get metrics"; the evaluation scenarios record HPA status themselves.
                    "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,"
                    "-horizontalpodautoscaling",
                ],
                logs / "kube-controller-manager.log",
            ).start()
        )

        sched_config = self._component_kubeconfig(pki, "kube-scheduler", "scheduler")
        self.processes.append(
            ManagedProcess(
                "kube-scheduler",
                [
                    str(bins["kube-scheduler"]),
                    f"--kubeconfig={sched_config}",
                    "--leader-elect=false",
                    "--secure-port=0",
                ],
                logs / "kube-scheduler.log",
            ).start()
        )

        kwok_dir = bins["kwok"].parent
        self._kubectl_apply(bins, [kwok_dir / "crds" / "logs.yaml", kwok_dir / "crds" / "clusterlogs.yaml"])
        kwok_config = self._write_kwok_config(kwok_dir)
        kwok_port = free_port()
        self.processes.append(
            ManagedProcess(
                "kwok",
                [
                    str(bins["kwok"]),
                    f"--kubeconfig={self._component_kubeconfig(pki, 'kwok', 'kwok')}",
                    f"--config={kwok_config}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                    "--node-ip=127.0.0.1",
                    f"--node-port={kwok_port}",
                    f"--server-address=127.0.0.1:{kwok_port}",
                    f"--tls-cert-file={pki.kwok.cert}",
                    f"--tls-private-key-file={pki.kwok.key}",
                    f"--cidr={POD_CIDR}",
                    "--enable-crds=Logs,ClusterLogs",
                ],
                logs / "kwok.log",
            ).start()
        )

        self._kubectl_apply(bins, [self._write_nodes()])
        client = self.api_client()
        try:
            from kubernetes import client as k8s

            core = k8s.CoreV1Api(client)

            def nodes_ready() -> bool:
                items = core.list_node().items
                ready = {
                    n.metadata.name
                    for n in items
                    for c in (n.status.conditions or [])
                    if c.type == "Ready" and c.status == "True"
                }
                return set(self.nodes) <= ready

            def default_service_account() -> bool:
                return any(
                    sa.metadata.name == "default" for sa in core.list_namespaced_service_account("default").items
                )

            wait_until("KWOK nodes Ready", nodes_ready, timeout, watch=self.processes)
            wait_until(
                "the default ServiceAccount (controller-manager)",
                default_service_account,
                timeout,
                watch=self.processes,
            )
        finally:
            client.close()
        self.log_simulator = LogSimulator(self.api_client(), self.data_dir / "simulated-logs").start()

    def _write_kwok_config(self, kwok_dir: Path) -> Path:
        documents = [yaml.safe_load(path.read_text()) for path in sorted((kwok_dir / "stages").glob("*.yaml"))]
        # KWOK's own stages leave alone what our stages simulate: a pod recorded as Pending
        # (ImagePullBackOff, ...) must not be moved on to Running, nor a node's recorded
        # conditions (MemoryPressure, ...) reset by the default heartbeat.
        for doc in documents:
            if (doc.get("metadata") or {}).get("name") in ("pod-ready", "node-initialize", "node-heartbeat"):
                doc["spec"]["selector"]["matchExpressions"].append(
                    {"key": '.metadata.annotations["' + SIMULATE_ANNOTATION + '"]', "operator": "DoesNotExist"}
                )
        ours = resources.files("lestrade.localcluster").joinpath("stages.yaml").read_text()
        documents += [doc for doc in yaml.safe_load_all(ours) if doc]
        config = self.data_dir / "kwok.yaml"
        config.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        return config

    def _write_nodes(self) -> Path:
        nodes = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                },
                "status": {
                    "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "250"},
                    "capacity": {"cpu": "16", "memory": "64Gi", "pods": "250"},
                },
            }
            for name in self.nodes
        ]
        path = self.data_dir / "nodes.yaml"
        path.write_text(yaml.safe_dump_all(nodes, sort_keys=False))
        return path

    def _kubectl_apply(self, bins: dict[str, Path], files: list[Path]) -> None:
        args = [str(bins["kubectl"]), f"--kubeconfig={self.kubeconfig}", "apply", "--server-side"]
        for path in files:
            args += ["-f", str(path)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise StartupError(f"kubectl apply failed: {proc.stderr.strip()}")

    def process_ids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def stop(self) -> None:
        """Stops every process (newest first) and removes the data dir if it made it."""
        if self.log_simulator is not None:
            self.log_simulator.stop()
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        if self.owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ExternalCluster(ServiceAccountTokens):
    """A cluster someone else runs (kind, a dev cluster): only a kubeconfig."""

    kubeconfig: Path
    nodes: list[str] = field(default_factory=list)

    @property
    def server(self) -> str:  # type: ignore[override]
        config = yaml.safe_load(Path(self.kubeconfig).read_text())
        current = config.get("current-context")
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == current)
        return next(c["cluster"]["server"] for c in config["clusters"] if c["name"] == ctx["cluster"])

    def stop(self) -> None:
        """Nothing to stop: the cluster is not ours."""
