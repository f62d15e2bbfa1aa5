"""One attempt to send one message to one Destination: read the Destination and its Secrets,
render the payload for its type, make the request, and say what happened.

The outcome says whether another attempt may help: a refused connection, a timeout, a 5xx, a
429 or a missing Destination/Secret (an admin may fix it) are retried; any other 4xx, or a
Slack API error other than rate limiting, is final. Redirects are not followed (a webhook that
answers 3xx is misconfigured, and following it would send the message somewhere nobody named).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from lestrade.kube import ApiException, Kube, is_not_found, resource_path
from lestrade.operator.delivery.payload import run_url
from lestrade.operator.delivery.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from lestrade.operator.delivery.slack import slack_message
from lestrade.operator.delivery.teams import teams_message
from lestrade.resources.constants import DESTINATION_PLURAL
from lestrade.resources.destination import DESTINATION_SECRET_LABEL, Destination, RetryPolicy

__all__ = ["Outcome", "Sender", "DELIVERY_HEADER", "EVENT_HEADER", "USER_AGENT"]

DELIVERY_HEADER = "X-Lestrade-Delivery"
EVENT_HEADER = "X-Lestrade-Event"
USER_AGENT = "lestrade-operator"
ERROR_CHARS = 512


@dataclass(frozen=True)
class Outcome:
    ok: bool
    retry: bool = False
    error: str | None = None
    ref: str | None = None
    """The receiver's handle of the message (Slack bot: `<channel>/<ts>`)."""
    policy: RetryPolicy = field(default_factory=RetryPolicy)


class _Refused(Exception):
    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class Sender:
    def __init__(self, kube: Kube, *, timeout: float = 10.0, console_url: str | None = None) -> None:
        self.kube = kube
        self.timeout = timeout
        self.console_url = console_url
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def destination(self, namespace: str, name: str) -> Destination:
        try:
            raw = await self.kube.get(resource_path(DESTINATION_PLURAL, namespace, name))
        except ApiException as exc:
            if is_not_found(exc):
                raise _Refused(f"Destination {namespace}/{name} not found", retry=True) from None
            raise _Refused(f"reading Destination {namespace}/{name}: {exc.status} {exc.reason}", retry=True) from None
        return Destination.model_validate(raw)

    async def secret(self, namespace: str, ref: Any) -> str:
        """One key of a Secret that consents to be read for destinations (its label)."""
        try:
            raw = await self.kube.get(f"/api/v1/namespaces/{namespace}/secrets/{ref.name}")
        except ApiException as exc:
            what = "not found" if is_not_found(exc) else f"{exc.status} {exc.reason}"
            raise _Refused(f"Secret {namespace}/{ref.name}: {what}", retry=True) from None
        labels = (raw.get("metadata") or {}).get("labels") or {}
        if labels.get(DESTINATION_SECRET_LABEL) != "true":
            raise _Refused(
                f"Secret {namespace}/{ref.name} lacks the label {DESTINATION_SECRET_LABEL}=true "
                "(the Secret's owner consents to its use by destinations with it)",
                retry=True,
            )
        data = (raw.get("data") or {}).get(ref.key)
        if data is None:
            raise _Refused(f"Secret {namespace}/{ref.name} has no key {ref.key}", retry=True)
        return base64.b64decode(data).decode("utf-8").strip()

    async def send(
        self,
        namespace: str,
        destination: str,
        payload: Mapping[str, Any],
        *,
        update_ref: str | None = None,
    ) -> Outcome:
        """Sends `payload` to the named Destination. `update_ref`: the receiver's handle of an
        earlier message this one replaces (Slack bot tokens update it in place)."""
        policy = RetryPolicy()
        try:
            dest = await self.destination(namespace, destination)
            policy = dest.spec.retry
            if dest.spec.console_url or self.console_url:
                payload = _with_console(payload, dest.spec.console_url or self.console_url)  # type: ignore[arg-type]
            if dest.spec.type == "Webhook":
                ref = await self._webhook(namespace, dest, payload)  # type: ignore[func-returns-value]
            elif dest.spec.type == "Slack":
                ref = await self._slack(namespace, dest, payload, update_ref)
            else:
                ref = await self._teams(namespace, dest, payload)  # type: ignore[func-returns-value]
        except _Refused as exc:
            return Outcome(False, exc.retry, str(exc)[:ERROR_CHARS], policy=policy)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Outcome(
                False, True, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS] or "connection failed", policy=policy
            )
        return Outcome(True, ref=ref, policy=policy)

    # -- per type ---------------------------------------------------------------------------------

    async def _post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        async with self._http().post(
            url,
            data=body,
            headers={"Content-Type": "application/json", **headers},
            allow_redirects=False,
        ) as response:
            return response.status, await response.read()

    @staticmethod
    def _check(status: int, text: bytes) -> None:
        if 200 <= status < 300:
            return
        excerpt = text[:200].decode("utf-8", "replace")
        raise _Refused(f"HTTP {status}: {excerpt}", retry=status >= 500 or status in (408, 429))

    async def _webhook(self, namespace: str, dest: Destination, payload: Mapping[str, Any]) -> None:
        spec = dest.spec.webhook
        assert spec is not None
        url = spec.url or await self.secret(namespace, spec.url_secret_ref)
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        stamp = int(time.time())
        headers = {DELIVERY_HEADER: payload["id"], EVENT_HEADER: payload["event"], TIMESTAMP_HEADER: str(stamp)}
        if spec.signing_secret_ref is not None:
            key = await self.secret(namespace, spec.signing_secret_ref)
            headers[SIGNATURE_HEADER] = sign(key.encode(), stamp, body)
        self._check(*await self._post(url, body, headers))

    async def _teams(self, namespace: str, dest: Destination, payload: Mapping[str, Any]) -> None:
        assert dest.spec.teams is not None
        url = await self.secret(namespace, dest.spec.teams.webhook_url_secret_ref)
        body = json.dumps(teams_message(payload), ensure_ascii=False).encode()
        self._check(*await self._post(url, body, {DELIVERY_HEADER: payload["id"]}))

    async def _slack(
        self,
        namespace: str,
        dest: Destination,
        payload: Mapping[str, Any],
        update_ref: str | None,
    ) -> str | None:
        spec = dest.spec.slack
        assert spec is not None
        message = slack_message(payload)
        if spec.webhook_url_secret_ref is not None:
            url = await self.secret(namespace, spec.webhook_url_secret_ref)
            self._check(*await self._post(url, json.dumps(message).encode(), {DELIVERY_HEADER: payload["id"]}))
            return None
        token = await self.secret(namespace, spec.token_secret_ref)
        method, body = "chat.postMessage", {"channel": spec.channel, **message}
        if update_ref and "/" in update_ref:
            channel, ts = update_ref.split("/", 1)
            method, body = "chat.update", {"channel": channel, "ts": ts, **message}
        status, text = await self._post(
            f"{spec.api_url.rstrip('/')}/{method}",
            json.dumps(body).encode(),
            {"Authorization": f"Bearer {token}", DELIVERY_HEADER: payload["id"]},
        )
        self._check(status, text)
        answer = json.loads(text or b"{}")
        if not answer.get("ok"):
            error = str(answer.get("error") or "unknown error")
            raise _Refused(f"Slack {method}: {error}", retry=error in ("ratelimited", "internal_error", "fatal_error"))
        return f"{answer.get('channel') or spec.channel}/{answer.get('ts')}" if answer.get("ts") else None


def _with_console(payload: Mapping[str, Any], console_url: str) -> dict[str, Any]:
    run = dict(payload["run"])
    plural = "conversations" if run["kind"] == "Conversation" else "investigations"
    run["url"] = run_url(console_url, plural, run["namespace"], run["name"])
    return {**payload, "run": run}
