"""The read-only Kubernetes tools against the real control plane with KWOK nodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.processes import wait_until
from lestrade.operator.tools import kubernetes_toolset

TOLERATE_KWOK = [k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists")]


@pytest.fixture(scope="module")
def kube(api_client):
    tools = {t.name: t for t in kubernetes_toolset(api_client).tools}
    return tools


def _deployment(name: str, replicas: int = 2, annotations: dict[str, str] | None = None) -> k8s.V1Deployment:
    labels = {"app": name}
    return k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name=name, labels=labels),
        spec=k8s.V1DeploymentSpec(
            replicas=replicas,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels, annotations=annotations),
                spec=k8s.V1PodSpec(
                    containers=[
                        k8s.V1Container(
                            name="app",
                            image="example.com/app:1.0",
                            resources=k8s.V1ResourceRequirements(
                                limits={"memory": "64Mi"}, requests={"cpu": "100m", "memory": "64Mi"}
                            ),
                        )
                    ],
                    tolerations=TOLERATE_KWOK,
                ),
            ),
        ),
    )


def _run_deployment(api_client, namespace: str, name: str, **kw) -> list[k8s.V1Pod]:
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    dep = _deployment(name, **kw)
    apps.create_namespaced_deployment(namespace, dep)
    want = dep.spec.replicas

    def ready() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=f"app={name}").items
        return len(pods) == want and all(p.status.container_statuses for p in pods)

    wait_until(f"{want} pods of {name}", ready, 60)
    return core.list_namespaced_pod(namespace, label_selector=f"app={name}").items


async def test_get_tables_read_like_kubectl(kube, api_client, namespace) -> None:
    pods = _run_deployment(api_client, namespace, "web")
    out = await kube["kubectl_get_by_kind_in_namespace"].run({"kind": "po", "namespace": namespace})
    assert out.status == "success", out.text()
    header = out.data.splitlines()[0].split()
    assert header[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert "NODE" in header and header[-1] == "LABELS"
    for pod in pods:
        row = next(line for line in out.data.splitlines() if line.startswith(pod.metadata.name))
        assert "Running" in row and "app=web" in row and pod.spec.node_name in row

    for kind in ("deploy", "deployments.apps", "Deployment", "deployment"):
        one = await kube["kubectl_get_by_name"].run({"kind": kind, "name": "web", "namespace": namespace})
        assert one.status == "success", (kind, one.text())
        assert one.data.splitlines()[1].split()[:2] == ["web", "2/2"], one.data

    # no namespace given: the object is found wherever it is
    anywhere = await kube["kubectl_get_by_name"].run({"kind": "deployment", "name": "web"})
    assert anywhere.status == "success", anywhere.text()
    rows = [line.split() for line in anywhere.data.splitlines()[1:]]
    assert [row[:2] for row in rows] == [["web", "2/2"]], anywhere.data

    nodes = await kube["kubectl_get_by_kind_in_cluster"].run({"kind": "nodes"})
    assert nodes.status == "success", nodes.text()
    assert "kwok-node-0" in nodes.data and "STATUS" in nodes.data.splitlines()[0]

    cluster_pods = await kube["kubectl_get_by_kind_in_cluster"].run({"kind": "pods"})
    assert cluster_pods.status == "success", cluster_pods.text()
    assert cluster_pods.data.splitlines()[0].startswith("NAMESPACE")
    assert namespace in cluster_pods.data


async def test_find_resource_by_name_fragment(kube, api_client, namespace) -> None:
    _run_deployment(api_client, namespace, "checkout-api", replicas=1)
    out = await kube["kubectl_find_resource"].run({"keyword": "checkout-a"})
    assert out.status == "success", out.text()
    assert "pods:" in out.data and "deployments.apps:" in out.data
    assert namespace in out.data
    only_deploy = await kube["kubectl_find_resource"].run({"keyword": "checkout-a", "kind": "deploy"})
    assert only_deploy.status == "success", only_deploy.text()
    assert "pods:" not in only_deploy.data and "checkout-api" in only_deploy.data
    none = await kube["kubectl_find_resource"].run({"keyword": "zz-nothing-like-this"})
    assert none.status == "success" and "No " in none.data


async def test_find_resource_greps_the_whole_row_status_included(kube, api_client, namespace) -> None:
    """Issue #27: "Which pods are crash-looping?" must find the pod whose STATUS column says
    CrashLoopBackOff, as the tool's description (a grep of `kubectl get -A` rows) promises."""
    pods = _run_deployment(
        api_client, namespace, "ledger", replicas=1, annotations={"lestrade.dev/simulate": "crashloop"}
    )
    _run_deployment(api_client, namespace, "healthy-neighbour", replicas=1)
    name = pods[0].metadata.name

    def crashlooping() -> bool:
        pod = k8s.CoreV1Api(api_client).read_namespaced_pod(name, namespace)
        return any(
            s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff"
            for s in pod.status.container_statuses or []
        )

    wait_until("the pod to crash-loop", crashlooping, 60)
    for args in ({"keyword": "CrashLoopBackOff", "kind": "pod"}, {"keyword": "crashloopbackoff"}):
        out = await kube["kubectl_find_resource"].run(args)
        assert out.status == "success", out.text()
        rows = [line for line in out.data.splitlines() if namespace in line]
        assert [r.split()[1] for r in rows] == [name], out.data
        assert "CrashLoopBackOff" in rows[0]
    # the image column matches too (a wide row), and a healthy pod does not match a status it lacks
    image = await kube["kubectl_find_resource"].run({"keyword": "example.com/app:1.0", "kind": "deploy"})
    assert "ledger" in image.data and "healthy-neighbour" in image.data, image.data
    assert "healthy-neighbour" not in (await kube["kubectl_find_resource"].run({"keyword": "CrashLoopBackOff"})).data
    assert "status" in kube["kubectl_find_resource"].description.lower()


async def test_unknown_kind_and_missing_object_are_clear_errors(kube, namespace) -> None:
    bad = await kube["kubectl_get_by_kind_in_namespace"].run({"kind": "flurbs", "namespace": namespace})
    assert bad.status == "error" and "flurbs" in (bad.error or "")
    missing = await kube["kubectl_describe"].run({"kind": "pod", "name": "nope", "namespace": namespace})
    assert missing.status == "error" and "not found" in (missing.error or "")
    injected = await kube["kubectl_describe"].run(
        {"kind": "configmap", "name": "../../secrets/x", "namespace": namespace}
    )
    assert injected.status == "error" and "not a valid" in (injected.error or "")


async def test_describe_crashlooping_pod_shows_oomkilled(kube, api_client, namespace) -> None:
    pods = _run_deployment(
        api_client,
        namespace,
        "cart",
        replicas=1,
        annotations={"lestrade.dev/simulate": "crashloop", "lestrade.dev/restart-count": "6"},
    )
    name = pods[0].metadata.name
    out = await kube["kubectl_describe"].run({"kind": "pod", "name": name, "namespace": namespace})
    assert out.status == "success", out.text()
    text = out.data
    for fragment in (
        "Name:",
        name,
        "Namespace:",
        namespace,
        "Node:",
        "kwok-node-",
        "Controlled By:",
        "ReplicaSet/cart-",
        "Containers:",
        "Image:",
        "example.com/app:1.0",
        "CrashLoopBackOff",
        "Last State:",
        "Terminated",
        "OOMKilled",
        "Exit Code:",
        "137",
        "Restart Count:",
        "6",
        "Limits:",
        "64Mi",
        "Conditions:",
        "Events:",
    ):
        assert fragment in text, f"{fragment!r} missing from:\n{text}"
    restart_line = next(line for line in text.splitlines() if "Restart Count:" in line)
    assert restart_line.split()[-1] == "6"

    # without a namespace the pod is located by name
    located = await kube["kubectl_describe"].run({"kind": "po", "name": name})
    assert located.status == "success", located.text()
    assert "OOMKilled" in located.data

    deployment = await kube["kubectl_describe"].run({"kind": "deploy", "name": "cart", "namespace": namespace})
    assert deployment.status == "success", deployment.text()
    assert "Replicas:" in deployment.data and "1 desired" in deployment.data
    assert "ReplicaSets:" in deployment.data and "cart-" in deployment.data


def _event(
    namespace: str,
    name: str,
    pod: k8s.V1Pod,
    reason: str,
    when: datetime,
    etype: str = "Warning",
    message: str = "",
    count: int = 1,
) -> k8s.CoreV1Event:
    return k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        involved_object=k8s.V1ObjectReference(
            kind="Pod", name=pod.metadata.name, namespace=namespace, uid=pod.metadata.uid, api_version="v1"
        ),
        reason=reason,
        message=message or reason,
        type=etype,
        count=count,
        first_timestamp=when - timedelta(minutes=5),
        last_timestamp=when,
        source=k8s.V1EventSource(component="kubelet"),
    )


async def test_events_sorted_by_time_for_object_and_namespace(kube, api_client, namespace, make_pod) -> None:
    core = k8s.CoreV1Api(api_client)
    pod = make_pod(namespace, "eventful")
    other = make_pod(namespace, "quiet")
    now = datetime.now(UTC)
    core.create_namespaced_event(
        namespace,
        _event(
            namespace,
            "e-new",
            pod,
            "BackOff",
            now - timedelta(minutes=1),
            message="Back-off restarting failed container",
            count=4,
        ),
    )
    core.create_namespaced_event(
        namespace, _event(namespace, "e-old", pod, "Pulled", now - timedelta(hours=1), etype="Normal")
    )
    core.create_namespaced_event(
        namespace, _event(namespace, "e-other", other, "Unhealthy", now - timedelta(minutes=30))
    )

    out = await kube["kubectl_events"].run({"namespace": namespace, "kind": "pod", "name": "eventful"})
    assert out.status == "success", out.text()
    lines = out.data.splitlines()
    order = [r for r in ("Pulled", "BackOff") if any(r in line for line in lines)]
    assert order == ["Pulled", "BackOff"]
    assert lines.index(next(l for l in lines if "Pulled" in l)) < lines.index(next(l for l in lines if "BackOff" in l))
    assert "Unhealthy" not in out.data
    assert "(x4 over" in out.data

    ns_events = await kube["kubectl_events"].run({"namespace": namespace})
    assert ns_events.status == "success", ns_events.text()
    body = ns_events.data
    assert body.index("Pulled") < body.index("Unhealthy") < body.index("BackOff")
    assert "pod/quiet" in body and "pod/eventful" in body

    described = await kube["kubectl_describe"].run({"kind": "pod", "name": "eventful", "namespace": namespace})
    assert described.status == "success", described.text()
    assert "Back-off restarting failed container" in described.data


async def test_logs_and_previous_logs(kube, namespace, make_pod, kwok_logs) -> None:
    make_pod(namespace, "logger")
    kwok_logs(
        namespace,
        "logger",
        "starting\nconnecting to db\nDB_PASSWORD=hunter2-in-logs\nready",
        previous="boot\npanic: out of memory",
    )
    out = await kube["kubectl_logs"].run({"pod_name": "logger", "namespace": namespace})
    assert out.status == "success", out.text()
    assert "connecting to db" in out.data and out.data.rstrip().endswith("ready")
    assert "hunter2-in-logs" not in out.data and "DB_PASSWORD=[REDACTED]" in out.data
    tail = await kube["kubectl_logs"].run({"pod_name": "logger", "namespace": namespace, "tail": 1})
    assert tail.status == "success", tail.text()
    assert tail.data.strip() == "ready"
    previous = await kube["kubectl_previous_logs"].run(
        {"pod_name": "logger", "namespace": namespace, "container": "app"}
    )
    assert previous.status == "success", previous.text()
    assert "panic: out of memory" in previous.data and "ready" not in previous.data
    wrong = await kube["kubectl_logs"].run({"pod_name": "logger", "namespace": namespace, "container": "sidecar"})
    assert wrong.status == "error" and "app" in (wrong.error or "")


async def test_logs_of_every_container_by_default(kube, namespace, make_pod, kwok_logs) -> None:
    make_pod(
        namespace,
        "two",
        containers=[
            k8s.V1Container(name="main", image="example.com/a:1"),
            k8s.V1Container(name="proxy", image="example.com/b:1"),
        ],
    )
    kwok_logs(namespace, "two", "main says hi", container="main")
    out = await kube["kubectl_logs"].run({"pod_name": "two", "namespace": namespace})
    assert out.status == "success", out.text()
    assert "==> container main <==" in out.data and "==> container proxy <==" in out.data
    assert "main says hi" in out.data


async def test_describe_node_and_yaml(kube, api_client, namespace) -> None:
    pods = _run_deployment(api_client, namespace, "sized", replicas=1)
    node = pods[0].spec.node_name
    out = await kube["kubectl_describe"].run({"kind": "node", "name": node})
    assert out.status == "success", out.text()
    for fragment in (
        "Name:",
        node,
        "Capacity:",
        "Allocatable:",
        "Non-terminated Pods:",
        pods[0].metadata.name,
        "Allocated resources:",
    ):
        assert fragment in out.data, fragment
    yaml_out = await kube["kubectl_get_yaml"].run({"kind": "deployment", "name": "sized", "namespace": namespace})
    assert yaml_out.status == "success", yaml_out.text()
    assert "kind: Deployment" in yaml_out.data and "replicas: 1" in yaml_out.data
    assert "managedFields" not in yaml_out.data


async def test_top_without_metrics_api_says_so(kube) -> None:
    for name in ("kubectl_top_pods", "kubectl_top_nodes"):
        out = await kube[name].run({})
        assert out.status == "error"
        assert "metrics API not available" in (out.error or "")


async def test_a_run_is_not_offered_top_tools_the_cluster_cannot_serve(api_client) -> None:
    """No metrics.k8s.io here: the registry a run is offered leaves kubectl_top_* out (their
    schemas would cost tokens on every request for tools that can only fail), keeps the rest."""
    from lestrade.operator.tools import default_registry

    registry = default_registry(api_client)
    offered = {t.name for t in (await registry.offered()).enabled_tools()}
    everything = {t.name for t in registry.enabled_tools()}
    assert everything - offered == {"kubectl_top_pods", "kubectl_top_nodes"}
    assert {"kubectl_describe", "kubectl_logs", "bash", "TodoWrite"} <= offered


async def test_tools_use_the_credentials_they_are_given(cluster, namespace) -> None:
    """Built from a ServiceAccount's client, the tools see only what its RBAC allows."""
    from kubernetes import config as k8s_config

    with k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig_for(namespace, "nobody"))) as client:
        tools = {t.name: t for t in kubernetes_toolset(client).tools}
        out = await tools["kubectl_get_by_kind_in_namespace"].run({"kind": "pods", "namespace": namespace})
        assert out.status == "error"
        assert "forbidden" in (out.error or "").lower() and "HTTP 403" in (out.error or "")


async def test_logs_default_to_the_crashed_container_as_a_digest(kube, namespace, make_pod, kwok_logs) -> None:
    """A crash-looping app beside a healthy proxy: by default the app's logs only, digested (the
    repeated trace counted), with a note naming the proxy; `raw`, `grep` and `container` give the
    rest, so nothing is out of reach."""
    make_pod(
        namespace,
        "shop",
        containers=[
            k8s.V1Container(name="app", image="example.com/a:1"),
            k8s.V1Container(name="proxy", image="example.com/b:1"),
        ],
        annotations={"lestrade.dev/simulate": "crashloop", "lestrade.dev/container": "app"},
        until=lambda p: any(s.name == "app" and s.restart_count for s in p.status.container_statuses or []),
    )
    trace = "java.lang.OutOfMemoryError: Java heap space\n" + "\n".join(
        f"\tat Cache.load(Cache.java:{n})" for n in range(15)
    )
    app_log = "\n".join(f"2026-11-26T10:00:{i:02d}Z INFO  request {i} served\n{trace}" for i in range(40))
    kwok_logs(namespace, "shop", app_log, container="app")

    out = await kube["kubectl_logs"].run({"pod_name": "shop", "namespace": namespace})
    assert out.status == "success", out.text()
    assert out.data.startswith("[log digest: ")
    assert "==> container" not in out.data  # one container shown
    assert "[other containers, not shown: proxy" in out.data
    assert "java.lang.OutOfMemoryError: Java heap space" in out.data and "repeated]" in out.data
    assert len(out.data) < len(app_log) / 4

    raw = await kube["kubectl_logs"].run({"pod_name": "shop", "namespace": namespace, "raw": True, "tail": 2000})
    assert raw.status == "success", raw.text()
    assert raw.data.count("java.lang.OutOfMemoryError") == 40 and "[log digest" not in raw.data

    grep = await kube["kubectl_logs"].run({"pod_name": "shop", "namespace": namespace, "grep": "request 17 "})
    assert grep.status == "success", grep.text()
    assert "request 17 served" in grep.data and "request 18" not in grep.data

    bad = await kube["kubectl_logs"].run({"pod_name": "shop", "namespace": namespace, "raw": "maybe"})
    assert bad.status == "error" and "raw" in (bad.error or "")
