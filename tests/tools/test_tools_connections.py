"""The tools' reads share one pool of kept-alive connections per identity (issue #23).

A burst of runs read the cluster through the blocking client in threads, and its pool discarded
connections: a new TLS connection for most tool calls. Here the apiserver is reached through a
TCP relay that counts the connections it accepts: the tools of many runs reading at once (one
registry per run, as the operator builds them) stay within `CONNECTIONS`, a second wave opens
none, and the answers are still the read-only identity's, Secret values masked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest
from kubernetes import client as k8s

from lestrade.localcluster.toolsaccount import ensure_tools_account
from lestrade.operator.tenancy.tools_identity import ToolsIdentity
from lestrade.operator.tools import kubernetes_toolset
from lestrade.operator.tools.kubernetes.api import CONNECTIONS, KubeApi, close_connections

RUNS = 120
SECRET_VALUE = "hunter2-relay-secret"


class Relay:
    """A TCP relay to the apiserver (TLS passes through untouched) that counts connections."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            # The loop's end cancels the relay's last connections; asyncio's stream server logs
            # a cancelled handler as an error, and there is nothing left to relay.
            writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"https://127.0.0.1:{port}"


@pytest.fixture
def identity(api_client: k8s.ApiClient, namespace: str) -> Iterator[ToolsIdentity]:
    account_namespace, name = ensure_tools_account(api_client, namespace).split("/")
    tools = ToolsIdentity(api_client, account_namespace, name)
    try:
        yield tools
    finally:
        tools.close()
        binding = f"lestrade-tools-read-{namespace}-lestrade-tools"
        k8s.RbacAuthorizationV1Api(api_client).delete_cluster_role_binding(binding)


@pytest.fixture
async def relayed(identity: ToolsIdentity, api_client: k8s.ApiClient) -> AsyncIterator[tuple[Relay, k8s.ApiClient]]:
    """The tools identity's client, pointed at the relay."""
    server = urlsplit(api_client.configuration.host)
    relay = Relay(server.hostname or "127.0.0.1", server.port or 443)
    identity.api_client.configuration.host = await relay.start()
    try:
        yield relay, identity.api_client
    finally:
        await close_connections()
        assert relay.server is not None
        relay.server.close()


async def test_many_runs_read_through_a_few_kept_alive_connections(relayed, api_client, namespace) -> None:
    relay, tools_client = relayed
    core = k8s.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="relay-creds"), string_data={"password": SECRET_VALUE}),
    )
    threads_before = {t.name for t in threading.enumerate()}

    async def one_run(kind: str, name: str) -> str:
        tools = {t.name: t for t in kubernetes_toolset(tools_client).tools}  # a registry per run
        out = await tools["kubectl_get_by_name"].run({"kind": kind, "name": name, "namespace": namespace})
        assert out.status == "success", out.text()
        return out.text()

    first = await asyncio.gather(*(one_run("serviceaccount", "default") for _ in range(RUNS)))
    assert all("default" in text for text in first)
    second = await asyncio.gather(*(one_run("configmap", "kube-root-ca.crt") for _ in range(RUNS)))
    assert all("kube-root-ca.crt" in text for text in second)
    # Each run's tools made discovery-free reads (~2 requests each): hundreds of requests, on
    # at most the pool's connections, kept alive from one wave to the next.
    opened = relay.accepted
    assert 0 < opened <= CONNECTIONS

    for _ in range(10):  # one after the other: the kept-alive connections carry them
        await one_run("serviceaccount", "default")
    assert relay.accepted == opened, "sequential reads opened new connections"

    # Still the read-only identity, through the same pool: no Secret value, whichever tool.
    tools = {t.name: t for t in kubernetes_toolset(tools_client).tools}
    for name in ("kubectl_get_yaml", "kubectl_describe", "kubectl_get_by_name"):
        out = await tools[name].run({"kind": "secret", "name": "relay-creds", "namespace": namespace})
        assert SECRET_VALUE not in out.text()
    # No thread per call: the reads ran in the event loop.
    assert not [t for t in threading.enumerate() if t.name not in threads_before and "kube" in t.name]


async def test_the_identity_still_cannot_write(relayed, namespace) -> None:
    _, tools_client = relayed
    api = KubeApi(tools_client)
    pods = await api.resolve("pods")
    with pytest.raises(Exception, match="forbidden|Forbidden|403"):
        await api.delete(pods.path(namespace, "anything"))


async def test_the_token_refresh_hook_runs_off_the_loop_and_not_per_request(relayed) -> None:
    _, tools_client = relayed
    config = tools_client.configuration
    renew = config.refresh_api_key_hook
    calls: list[str] = []

    def counting(cfg: k8s.Configuration) -> None:
        calls.append(threading.current_thread().name)
        renew(cfg)

    config.refresh_api_key_hook = counting
    api = KubeApi(k8s.ApiClient(config))  # a client of its own: its first request refreshes
    for _ in range(5):
        await api.get_json("/api/v1/namespaces/default")
    assert len(calls) == 1
    assert calls[0] != threading.current_thread().name
