"""Helpers of the delivery tests: receivers (real HTTP servers on free ports that record every
request) and checks of Slack's and Teams' message formats, written from their documentation.

Slack Block Kit (https://api.slack.com/reference/block-kit/blocks and /composition-objects,
/block-elements): a message has at most 50 blocks; `header`: a plain_text text object of at most
150 characters; `section`: a text object of at most 3000 characters and/or `fields`, at most 10
text objects of at most 2000 each; `actions`: 1-25 interactive elements; `context`: 1-10 image or
text elements; a text object is `{type: plain_text|mrkdwn, text, emoji? (plain_text only),
verbatim? (mrkdwn only)}`; a `button`: plain_text text at most 75, action_id at most 255
(unique in the message), value at most 2000, url at most 3000, style primary|danger; block_id
at most 255 and unique.

Teams (https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/
connectors-using): `{type: "message", attachments: [{contentType:
"application/vnd.microsoft.card.adaptive", contentUrl: null, content: <AdaptiveCard>}]}`, at most
28 KB; Adaptive Card (https://adaptivecards.io/explorer/): `type: AdaptiveCard`, `version`
(Teams webhooks: at most 1.4 — the later `Action.Execute` and 1.5 elements are not rendered),
`body` of elements (TextBlock needs `text`; FactSet needs `facts` of `{title, value}` strings),
`actions` (Action.OpenUrl needs `url` and `title`).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Receiver", "Received", "free_port", "check_slack_message", "check_teams_message"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server that records every POST; `answer(received) -> (status, body dict)`."""

    answer: Callable[[Received], tuple[int, Any]] = lambda r: (200, {"ok": True})
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                with receiver._lock:
                    receiver.received.append(got)
                status, body = receiver.answer(got)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# -- Slack ---------------------------------------------------------------------------------------


def _text_object(obj: Any, where: str, limit: int, kinds: tuple[str, ...] = ("plain_text", "mrkdwn")) -> None:
    assert isinstance(obj, dict), f"{where}: a text object"
    assert obj.get("type") in kinds, f"{where}: type {obj.get('type')!r} not in {kinds}"
    assert isinstance(obj.get("text"), str) and 1 <= len(obj["text"]) <= limit, f"{where}: text of 1-{limit} characters"
    allowed = {"type", "text", "emoji"} if obj["type"] == "plain_text" else {"type", "text", "verbatim"}
    assert set(obj) <= allowed, f"{where}: unknown keys {set(obj) - allowed}"


def check_slack_message(message: dict[str, Any]) -> None:
    """Fails with the rule broken, as Slack would refuse (invalid_blocks) or cut the message."""
    assert isinstance(message.get("text"), str) and message["text"], "a top-level text fallback"
    blocks = message.get("blocks")
    assert isinstance(blocks, list) and 1 <= len(blocks) <= 50, "1-50 blocks"
    action_ids: set[str] = set()
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"blocks[{i}] ({block.get('type')})"
        if "block_id" in block:
            assert isinstance(block["block_id"], str) and len(block["block_id"]) <= 255, f"{where}: block_id ≤ 255"
            assert block["block_id"] not in block_ids, f"{where}: block_id unique"
            block_ids.add(block["block_id"])
        kind = block.get("type")
        if kind == "header":
            assert set(block) <= {"type", "text", "block_id"}
            _text_object(block["text"], where, 150, ("plain_text",))
        elif kind == "section":
            assert "text" in block or "fields" in block, f"{where}: text or fields"
            if "text" in block:
                _text_object(block["text"], where, 3000)
            if "fields" in block:
                assert 1 <= len(block["fields"]) <= 10, f"{where}: 1-10 fields"
                for j, f in enumerate(block["fields"]):
                    _text_object(f, f"{where}.fields[{j}]", 2000)
        elif kind == "actions":
            elements = block.get("elements")
            assert isinstance(elements, list) and 1 <= len(elements) <= 25, f"{where}: 1-25 elements"
            for j, element in enumerate(elements):
                ew = f"{where}.elements[{j}]"
                assert element.get("type") == "button", f"{ew}: a button"
                _text_object(element["text"], ew, 75, ("plain_text",))
                action = element.get("action_id")
                assert isinstance(action, str) and 1 <= len(action) <= 255, f"{ew}: action_id ≤ 255"
                key = (block.get("block_id"), action)
                assert str(key) not in action_ids, f"{ew}: action_id unique within its block"
                action_ids.add(str(key))
                if "value" in element:
                    assert isinstance(element["value"], str) and len(element["value"]) <= 2000, f"{ew}: value ≤ 2000"
                if "url" in element:
                    assert element["url"].startswith(("http://", "https://")) and len(element["url"]) <= 3000, (
                        f"{ew}: url"
                    )
                if "style" in element:
                    assert element["style"] in ("primary", "danger"), f"{ew}: style primary or danger"
        elif kind == "context":
            elements = block.get("elements")
            assert isinstance(elements, list) and 1 <= len(elements) <= 10, f"{where}: 1-10 elements"
            for j, element in enumerate(elements):
                _text_object(element, f"{where}.elements[{j}]", 3000)
        else:
            raise AssertionError(f"{where}: a block type this check does not know")


# -- Teams ---------------------------------------------------------------------------------------


def check_teams_message(message: dict[str, Any]) -> None:
    assert len(json.dumps(message).encode()) <= 28 * 1024, "at most 28 KB"
    assert message.get("type") == "message"
    attachments = message.get("attachments")
    assert isinstance(attachments, list) and len(attachments) == 1
    attachment = attachments[0]
    assert attachment.get("contentType") == "application/vnd.microsoft.card.adaptive"
    assert "contentUrl" in attachment and attachment["contentUrl"] is None
    card = attachment["content"]
    assert card.get("type") == "AdaptiveCard"
    assert card.get("$schema") == "http://adaptivecards.io/schemas/adaptive-card.json"
    major, minor = (int(x) for x in card["version"].split("."))
    assert (major, minor) <= (1, 4), "Teams webhooks render Adaptive Cards up to 1.4"
    assert isinstance(card.get("body"), list) and card["body"]
    for i, element in enumerate(card["body"]):
        if element["type"] == "TextBlock":
            assert isinstance(element.get("text"), str) and element["text"], f"body[{i}]: TextBlock text"
            assert set(element) <= {
                "type",
                "text",
                "wrap",
                "size",
                "weight",
                "color",
                "separator",
                "isSubtle",
                "spacing",
            }
        elif element["type"] == "FactSet":
            for fact in element["facts"]:
                assert set(fact) == {"title", "value"} and all(isinstance(v, str) for v in fact.values())
        else:
            raise AssertionError(f"body[{i}]: an element type this check does not know: {element['type']}")
    for action in card.get("actions") or []:
        assert (
            action["type"] == "Action.OpenUrl"
            and action.get("title")
            and action["url"].startswith(("http://", "https://"))
        )
