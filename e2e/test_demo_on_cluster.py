"""The demo model, the real agent loop and the real tools against an OOM-killed, crash-looping
KWOK pod.

Every tool call the demo makes must fit the real tool schemas (a schema drift would make the
demo model call tools that reject their arguments), and the answer must contain facts that only
the cluster had: the pod's generated name, its restart count, the crashed container's log line.
"""

from __future__ import annotations

import jsonschema
from kubernetes import client as k8s

from lestrade.config import demo_model
from lestrade.localcluster.processes import wait_until
from lestrade.operator.agent import Agent
from lestrade.operator.agent.events import Answer, ToolResult, ToolStarted
from lestrade.operator.agent.prompts import DEFAULT_SECTIONS, InvestigationRequest, PromptConfig
from lestrade.operator.tools import default_registry


async def test_demo_model_investigates_a_real_crash_loop(api_client, namespace, kwok_logs, model_server) -> None:
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    labels = {"app": "inventory-api"}
    apps.create_namespaced_deployment(
        namespace,
        k8s.V1Deployment(
            metadata=k8s.V1ObjectMeta(name="inventory-api"),
            spec=k8s.V1DeploymentSpec(
                replicas=1,
                selector=k8s.V1LabelSelector(match_labels=labels),
                template=k8s.V1PodTemplateSpec(
                    metadata=k8s.V1ObjectMeta(
                        labels=labels,
                        annotations={
                            "lestrade.dev/simulate": "crashloop",  # OOMKilled, exit code 137 by default
                            "lestrade.dev/restart-count": "13",
                        },
                    ),
                    spec=k8s.V1PodSpec(
                        containers=[k8s.V1Container(name="api", image="registry.example/inventory:2.1")]
                    ),
                ),
            ),
        ),
    )

    def crashlooping_pod() -> str | None:
        pods = core.list_namespaced_pod(namespace, label_selector="app=inventory-api").items
        return pods[0].metadata.name if pods and pods[0].status.container_statuses else None

    wait_until("a crash-looping pod", lambda: crashlooping_pod() is not None, 60)
    pod = crashlooping_pod()
    kwok_logs(namespace, pod, "started", previous="loading catalogue into memory: 1843 MiB")

    registry = default_registry(api_client)
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in registry.schemas()}
    agent = Agent(demo_model(model_server.base_url), registry, PromptConfig(sections=DEFAULT_SECTIONS))
    messages = agent.initial_messages(
        InvestigationRequest(
            title="KubePodCrashLooping", description=f"pods of inventory-api in namespace {namespace} restart"
        )
    )
    events = [event async for event in agent.run(messages)]

    started = [e for e in events if isinstance(e, ToolStarted)]
    assert [e.name for e in started] == [
        "kubectl_find_resource",
        "kubectl_describe",
        "kubectl_previous_logs",
        "kubectl_events",
    ]
    for call in started:
        jsonschema.validate(call.params, schemas[call.name])
    results = [e for e in events if isinstance(e, ToolResult)]
    assert all(r.status == "success" for r in results), [(r.name, r.output[:200]) for r in results]

    answer = events[-1]
    assert isinstance(answer, Answer), answer
    assert answer.text.startswith("> **Demo model:**")
    for fact in (pod, namespace, "CrashLoopBackOff", "OOMKilled", "137", "13", "1843 MiB"):
        assert fact in answer.text, f"{fact!r} missing from:\n{answer.text}"
    assert set(answer.sections or {}) >= {"Alert Explanation", "Key Findings", "Next Steps"}
