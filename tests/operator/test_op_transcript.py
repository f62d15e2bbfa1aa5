"""The transcript store against the real apiserver: chunking, parts, ownership, reload."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from opkit import create_inv

from lestrade.kube import Kube
from lestrade.runs.transcript import TRANSCRIPT_LABEL, Transcript


def _owner(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


async def test_transcript_is_chunked_owned_and_reloads_losslessly(
    api_client: k8s.ApiClient, crds: None, namespace: str
) -> None:
    inv = create_inv(api_client, namespace, "chunky")
    kube = Kube(api_client)
    limit = 8192
    writer = Transcript(kube, namespace, _owner(inv), chunk_limit=limit)
    messages = [
        {"role": "system", "content": "you are a detective"},
        {"role": "user", "content": "ünïcødé ✓ " * 50},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call/1 odd id", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call/1 odd id", "content": "x" * 30_000},  # > 3 chunks
        {"role": "assistant", "content": "done"},
    ]
    for message in messages[:3]:
        writer.append_message(message)
    writer.append_started("call/1 odd id")
    await writer.sync()
    writer.append_decision("call/1 odd id", True, "looks safe", "sha256:abc")
    for message in messages[3:]:
        writer.append_message(message)
    writer.flush_soon()
    await writer.sync()

    reader = Transcript(kube, namespace, _owner(inv), chunk_limit=limit)
    state = await reader.load()
    assert state.messages == messages
    assert state.started == {"call/1 odd id"}
    assert state.decisions == {"call/1 odd id": {"approved": True, "reason": "looks safe", "digest": "sha256:abc"}}
    assert reader.chunks == writer.chunks and len(writer.chunks) >= 4

    found = k8s.CoreV1Api(api_client).list_namespaced_config_map(
        namespace, label_selector=f"{TRANSCRIPT_LABEL}={inv['metadata']['uid']}"
    )
    assert len(found.items) == len(writer.chunks)
    for cm in found.items:
        size = sum(len(k) + len(v) for k, v in (cm.data or {}).items())
        assert size <= limit
        (ref,) = cm.metadata.owner_references
        assert ref.uid == inv["metadata"]["uid"] and ref.kind == "Investigation"

    # A reloaded writer appends after what is stored, in the last chunk or a new one.
    reader.append_message({"role": "user", "content": "and one more thing"})
    await reader.sync()
    again = await Transcript(kube, namespace, _owner(inv), chunk_limit=limit).load()
    assert again.messages == [*messages, {"role": "user", "content": "and one more thing"}]
    await kube.aclose()


def test_readers_take_only_lestrades_chunks_and_the_creators_own() -> None:
    """A chunk signed by another user (admission makes a user sign with their own name) is
    nobody's history; neither is a chunk without a numeric index (it cannot be ordered)."""
    from lestrade.resources.keys import TRANSCRIPT_AUTHOR_ANNOTATION
    from lestrade.runs.transcript import CHUNK_LABEL, owned_chunks

    def chunk(name: str, index: str, author: str | None = None) -> dict[str, Any]:
        annotations = {TRANSCRIPT_AUTHOR_ANNOTATION: author} if author is not None else {}
        return {"metadata": {"name": name, "labels": {CHUNK_LABEL: index}, "annotations": annotations}}

    items = [
        chunk("ours-1", "1"),
        chunk("mallorys", "2", "mallory"),
        chunk("ours-0", "0"),
        chunk("alices", "3", "alice"),
        chunk("unordered", "x"),
        chunk("empty-author", "4", ""),
    ]
    names = lambda found: [c["metadata"]["name"] for c in found]  # noqa: E731
    assert names(owned_chunks(items, "alice")) == ["ours-0", "ours-1", "alices"]
    assert names(owned_chunks(items, None)) == ["ours-0", "ours-1"]
    assert names(owned_chunks(items, "mallory")) == ["ours-0", "ours-1", "mallorys"]
