"""Tokens per investigation (issue #23): the crash-looping pod of the issue, the three-call plan.

    .venv/bin/python bench/tokens_bench.py

A pod with two containers — `app` crash-looping (OOMKilled, 390 log lines with the same Java
OOM trace on every start, current and previous) and a healthy `proxy` printing its access log —
and 31 Warning/Normal Events. The scripted model makes the same three tool calls every time
(`kubectl_describe` of the pod, `kubectl_previous_logs`, `kubectl_logs`, one per model call) and
then answers; the real operator runs the real tools against the local control plane. Every
request the model server received is counted with cl100k (messages and tool schemas), so the
figure is what a provider would bill.

Printed side by side, in the same run: the logs as the model gets them by default (digests, the
crashed container) and as raw lines (`raw: true` and every container: what the tools returned
before the digests), with the issue's figures for HolmesGPT 0.45 on the same pod (53,976) and
Lestrade before (31,220) beside the target (<= 0.35 x HolmesGPT).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "operator"))

import tiktoken  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from opkit import OperatorThread, create_inv, model_list, phase_is, wait_inv  # noqa: E402

import lestrade  # noqa: E402,F401  (offline litellm/tiktoken first)
from lestrade.localcluster import LocalCluster  # noqa: E402
from lestrade.localcluster.simlogs import as_cri_log  # noqa: E402
from lestrade.modelserver import Scenario, ScriptedModelServer, Step, ToolCall  # noqa: E402
from lestrade.resources.install import install_crds  # noqa: E402

HOLMES_TOKENS = 53_976  # issue #23: HolmesGPT 0.45, same pod, same plan, cl100k over every request
BEFORE_TOKENS = 31_220  # issue #23: Lestrade before the digests
TARGET_RATIO = 0.35
NAMESPACE = "tokens-bench"
POD = "inventory-api-7d9f8"
KWOK_TOLERATION = k8s.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists", effect="NoSchedule")


def java_log(rng: random.Random, starts: int = 4) -> str:
    """~390 lines: four lifetimes, each a start, some requests, then the same OOM trace."""
    lines: list[str] = []
    second = 0
    for _ in range(starts):

        def ts() -> str:
            nonlocal second
            second += 3
            return f"2026-11-26T09:{second // 60 % 60:02d}:{second % 60:02d}.{rng.randint(0, 999):03d}Z"

        lines.append(f"{ts()} INFO  [main] c.e.inventory.Application - Starting Application v2.3.1 using Java 17.0.9")
        lines.append(f"{ts()} INFO  [main] c.e.inventory.Application - The following profiles are active: prod")
        for _ in range(36):
            lines.append(
                f"{ts()} INFO  [http-nio-8080-exec-{rng.randint(1, 9)}] c.e.inventory.ItemController - "
                f"GET /api/items/{rng.randint(1, 99999)} -> 200 in {rng.randint(3, 90)} ms"
            )
        lines.append(f"{ts()} WARN  [cache-loader] c.e.inventory.cache.Warmup - heap usage at 9{rng.randint(1, 9)}%")
        lines.append(f"{ts()} ERROR [cache-loader] c.e.inventory.cache.Warmup - cache warmup failed")
        lines.append("java.lang.OutOfMemoryError: Java heap space")
        frames = [
            "java.base/java.util.Arrays.copyOf(Arrays.java:3537)",
            "java.base/java.util.ArrayList.grow(ArrayList.java:237)",
            "java.base/java.util.ArrayList.add(ArrayList.java:455)",
            "com.example.inventory.cache.ItemCache.load(ItemCache.java:88)",
            "com.example.inventory.cache.ItemCache.warm(ItemCache.java:61)",
            "com.example.inventory.cache.Warmup.run(Warmup.java:40)",
            "java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1136)",
            "java.base/java.util.concurrent.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:635)",
            "java.base/java.lang.Thread.run(Thread.java:840)",
        ]
        lines += [f"\tat {f}" for f in frames * 5]
        lines.append("\t... 3 more")
        lines.append(f"{ts()} INFO  [main] c.e.inventory.Application - Shutting down")
    return "\n".join(lines)


def access_log(rng: random.Random, count: int = 390) -> str:
    return "\n".join(
        f"10.244.0.{rng.randint(2, 250)} - - [26/Nov/2026:09:{i // 60 % 60:02d}:{i % 60:02d} +0000] "
        f'"GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.35"'
        for i in range(count)
    )


def make_pod(api: k8s.ApiClient, folder: Path) -> None:
    core = k8s.CoreV1Api(api)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    core.create_namespaced_pod(
        NAMESPACE,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(
                name=POD,
                labels={"app": "inventory-api"},
                annotations={
                    "lestrade.dev/simulate": "crashloop",
                    "lestrade.dev/container": "app",
                    "lestrade.dev/restart-count": "4",
                },
            ),
            spec=k8s.V1PodSpec(
                containers=[
                    k8s.V1Container(
                        name="app",
                        image="registry.example.com/inventory-api:2.3.1",
                        resources=k8s.V1ResourceRequirements(limits={"memory": "512Mi"}),
                    ),
                    k8s.V1Container(name="proxy", image="registry.example.com/envoy:1.31"),
                ],
                tolerations=[KWOK_TOLERATION],
            ),
        ),
    )
    rng = random.Random(23)
    logs = []
    for container, current, previous in (("app", java_log(rng), java_log(rng)), ("proxy", access_log(rng), None)):
        path = folder / f"{container}.log"
        path.write_text(as_cri_log(current))
        log: dict[str, Any] = {"logsFile": str(path), "follow": False, "containers": [container]}
        if previous is not None:
            old = folder / f"{container}.previous.log"
            old.write_text(as_cri_log(previous))
            log["previousLogsFile"] = str(old)
        logs.append(log)
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "kwok.x-k8s.io",
        "v1alpha1",
        NAMESPACE,
        "logs",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": POD, "namespace": NAMESPACE},
            "spec": {"logs": logs},
        },
    )
    ref = k8s.V1ObjectReference(kind="Pod", name=POD, namespace=NAMESPACE, api_version="v1")
    reasons = [
        ("Warning", "BackOff", "Back-off restarting failed container app in pod " + POD),
        ("Normal", "Pulled", 'Container image "registry.example.com/inventory-api:2.3.1" already present'),
        ("Normal", "Created", "Created container: app"),
        ("Normal", "Started", "Started container app"),
        ("Warning", "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503"),
    ]
    now = time.time()
    for i in range(31):
        etype, reason, message = reasons[i % len(reasons)]
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60 * (31 - i)))
        core.create_namespaced_event(
            NAMESPACE,
            k8s.CoreV1Event(
                metadata=k8s.V1ObjectMeta(name=f"{POD}.{i:04d}"),
                involved_object=ref,
                reason=reason,
                message=f"{message} (#{i})" if reason == "Unhealthy" else message,
                type=etype,
                count=1,
                first_timestamp=stamp,
                last_timestamp=stamp,
                source=k8s.V1EventSource(component="kubelet"),
            ),
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if "Shutting down" in core.read_namespaced_pod_log(POD, NAMESPACE, container="app", previous=True):
                return
        except k8s.ApiException:
            pass
        time.sleep(0.5)
    raise RuntimeError("KWOK did not serve the pod's logs")


def plan(name: str, raw: bool) -> Scenario:
    base = {"pod_name": POD, "namespace": NAMESPACE}
    log_calls = (
        [
            ToolCall(name="kubectl_previous_logs", arguments={**base, "raw": True, "container": "app"}),
            ToolCall(name="kubectl_logs", arguments={**base, "raw": True, "container": "app"}),
            ToolCall(name="kubectl_logs", arguments={**base, "raw": True, "container": "proxy"}),
        ]
        if raw
        else [ToolCall(name="kubectl_previous_logs", arguments=base), ToolCall(name="kubectl_logs", arguments=base)]
    )
    steps = [
        Step(
            tool_calls=[
                ToolCall(name="kubectl_describe", arguments={"kind": "pod", "name": POD, "namespace": NAMESPACE})
            ]
        ),
        Step(tool_calls=log_calls[:1]),
        Step(tool_calls=log_calls[1:]),
    ]
    return Scenario(name=name, steps=[*steps, Step(content="# Alert Explanation\nThe app runs out of heap.")])


def count_tokens(requests: list[dict[str, Any]], encoding: Any) -> tuple[int, int]:
    total = evidence = 0
    for body in requests:
        for message in body.get("messages") or []:
            text = (
                message.get("content")
                if isinstance(message.get("content"), str)
                else json.dumps(message.get("content"))
            )
            n = len(encoding.encode(text or "")) + len(encoding.encode(json.dumps(message.get("tool_calls") or "")))
            total += n
            if message.get("role") == "tool":
                evidence += n
        total += len(encoding.encode(json.dumps(body.get("tools") or [])))
    return total, evidence


def main() -> int:
    encoding = tiktoken.get_encoding("cl100k_base")
    folder = Path(tempfile.mkdtemp(prefix="tokens-bench-"))
    cluster = LocalCluster.start()
    server = ScriptedModelServer().start()
    results: dict[str, tuple[int, int, int, bool]] = {}
    try:
        api = cluster.api_client()
        install_crds(api, wait=True, timeout=60)
        make_pod(api, folder)
        for label, raw in (("digest (default)", False), ("raw lines", True)):
            name = f"tokens-{'raw' if raw else 'digest'}"
            server.add_scenario(plan(name, raw))
            op = OperatorThread(cluster, NAMESPACE, model_list(server, name), tools=None).start()
            try:
                create_inv(
                    api,
                    NAMESPACE,
                    name,
                    title=f"{POD} is crash-looping",
                    subject={"kind": "Pod", "name": POD, "namespace": NAMESPACE},
                )
                done = wait_inv(api, NAMESPACE, name, phase_is("Succeeded", "Failed"), timeout=300)
            finally:
                op.stop()
            requests = server.requests(name)
            total, evidence = count_tokens(requests, encoding)
            tool_text = "\n".join(str(m.get("content")) for m in requests[-1]["messages"] if m.get("role") == "tool")
            kept = "java.lang.OutOfMemoryError: Java heap space" in tool_text and "OOMKilled" in tool_text
            results[label] = (total, evidence, len(requests), kept and done["status"]["phase"] == "Succeeded")
    finally:
        server.stop()
        cluster.stop()
    print("tokens per investigation (cl100k, every model request: messages + tool schemas)")
    print(f"  {'logs as':<18} {'tokens':>8} {'tool output':>12} {'requests':>9}  evidence (OOM trace + OOMKilled)")
    for label, (total, evidence, count, kept) in results.items():
        print(f"  {label:<18} {total:>8,} {evidence:>12,} {count:>9}  {'kept' if kept else 'LOST'}")
    digest = results["digest (default)"][0]
    raw = results["raw lines"][0]
    print(f"  digest / raw lines, same run: {digest / raw:.2f}x ({1 - digest / raw:.0%} fewer tokens)")
    print(f"  digest vs Lestrade before (issue: {BEFORE_TOKENS:,}): {digest / BEFORE_TOKENS:.2f}x")
    print(
        f"  digest vs HolmesGPT 0.45 (issue: {HOLMES_TOKENS:,}): {digest / HOLMES_TOKENS:.2f}x "
        f"(target <= {TARGET_RATIO}x: {'met' if digest <= TARGET_RATIO * HOLMES_TOKENS else 'NOT met'})"
    )
    ok = all(kept for *_, kept in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
