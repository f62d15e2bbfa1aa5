"""The plugin's commands, each an async function of its parsed arguments returning an exit code
(`ExitCode`): 0 done, 1 the run failed, 2 bad usage, 3 waiting for approval, 4 not found,
5 refused by the cluster (RBAC or admission)."""

from __future__ import annotations

import argparse
import json
import sys
from enum import IntEnum
from typing import Any

from lestrade.kube import ApiException, resource_path
from lestrade.plugin.alerts import alert_spec
from lestrade.plugin.follow import Outcome, follow
from lestrade.plugin.output import age, clean, dump, item_lines, page, pending_lines, spinner, table
from lestrade.plugin.session import Session
from lestrade.resources import (
    API_VERSION,
    CONVERSATION_KIND,
    CONVERSATION_PLURAL,
    INVESTIGATION_KIND,
    INVESTIGATION_PLURAL,
)
from lestrade.runs.history import MAX_RESULTS, FindingsIndex, SearchQuery, parse_since
from lestrade.runs.summary import run_summary, timeline, turn_start
from lestrade.runs.transcript import Transcript
from lestrade.runs.views import view_of

__all__ = ["ExitCode", "UsageError", "COMMANDS"]


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    AWAITING_APPROVAL = 3
    NOT_FOUND = 4
    REFUSED = 5


class UsageError(Exception):
    """Bad arguments: the message names the flag."""


def _out(line: str = "") -> None:
    print(line, flush=True)


def _show(item: dict[str, Any]) -> None:
    for line in item_lines(item):
        _out(line)


def _exit_for(outcome: Outcome) -> ExitCode:
    return {"Failed": ExitCode.FAILED, "AwaitingApproval": ExitCode.AWAITING_APPROVAL}.get(outcome.phase, ExitCode.OK)


def _report(outcome: Outcome, fmt: str | None, turn: int | None = None) -> ExitCode:
    obj = outcome.object
    if fmt:
        since = turn_start(outcome.state, turn) if obj.get("kind") == CONVERSATION_KIND else 0
        dump({"summary": run_summary(obj), "timeline": timeline(outcome.state, since)}, fmt)
    else:
        summary = run_summary(obj)
        usage = summary["usage"]
        _out(
            f"{summary['kind'].lower()}/{summary['name']}: {outcome.phase} — {summary['toolCallCount']} tool "
            f"calls, {usage['totalTokens']} tokens, ${usage['cost']:.6f}"
        )
        if outcome.phase == "Failed" and summary["message"]:
            _out(f"  {clean(summary['message'])}")
        if outcome.phase == "AwaitingApproval":
            _out("waiting for approval:")
            for line in pending_lines(summary["pendingApprovals"]):
                _out(line)
            _out(f"decide with: kubectl lestrade approve {summary['name']}  (or deny)")
    return _exit_for(outcome)


def _waiting_hint(name: str) -> Any:
    def hint(obj: dict[str, Any]) -> None:
        _out(f"  ↳ waiting for a decision: kubectl lestrade approve {name}  (or deny)")

    return hint


async def _follow(
    session: Session, plural: str, name: str, args: argparse.Namespace, *, turn: int | None = None
) -> ExitCode:
    quiet = bool(args.output)
    async with spinner(f"following {plural}/{name}"):
        outcome = await follow(
            session,
            plural,
            name,
            (lambda item: None) if quiet else _show,
            turn=turn,
            stop_at_approval=getattr(args, "stop_at_approval", False),
            on_waiting=None if quiet else _waiting_hint(name),
        )
    return _report(outcome, args.output, turn)


# -- investigate ---------------------------------------------------------------------------------


def _subject(text: str | None, namespace: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    kind, sep, name = text.partition("/")
    if not sep or not kind or not name:
        raise UsageError(f"--subject: expected KIND/NAME (e.g. pod/web-1), got {text!r}")
    subject: dict[str, Any] = {"kind": kind, "name": name}
    if namespace:
        subject["namespace"] = namespace
    return subject


async def investigate(session: Session, args: argparse.Namespace) -> ExitCode:
    if args.alert:
        raw = sys.stdin.read() if args.alert == "-" else open(args.alert).read()  # noqa: ASYNC230 (a CLI: nothing else runs)
        try:
            spec = alert_spec(json.loads(raw))
        except (json.JSONDecodeError, ValueError) as exc:
            raise UsageError(f"--alert: {exc}") from exc
    else:
        spec = {}
    given = {
        "title": args.title,
        "description": args.description,
        "question": args.question,
        "subject": _subject(args.subject, args.subject_namespace or session.namespace),
        "model": args.model,
        "maxSteps": args.max_steps,
        "timeout": args.timeout,
    }
    spec.update({k: v for k, v in given.items() if v is not None})
    if not spec.get("title"):
        raise UsageError("--title (or --alert): an investigation needs a title")
    spec["enableToolApproval"] = not args.no_approval
    metadata: dict[str, Any] = {"name": args.name} if args.name else {"generateName": "inv-"}
    created = await session.kube.create(
        resource_path(INVESTIGATION_PLURAL, session.namespace),
        {
            "apiVersion": API_VERSION,
            "kind": INVESTIGATION_KIND,
            "metadata": metadata,
            "spec": spec,
        },
    )
    name = created["metadata"]["name"]
    if args.no_follow:
        if args.output:
            dump({"summary": run_summary(created), "timeline": []}, args.output)
        else:
            _out(f"investigation/{name} created in {session.namespace}")
        return ExitCode.OK
    if not args.output:
        _out(f"investigation/{name} created in {session.namespace}; following (Ctrl-C stops following, not the run)")
    return await _follow(session, INVESTIGATION_PLURAL, name, args)


# -- follow ----------------------------------------------------------------------------------------


async def follow_command(session: Session, args: argparse.Namespace) -> ExitCode:
    plural, obj = await session.resolve(args.name)
    return await _follow(session, plural, obj["metadata"]["name"], args, turn=args.turn)


# -- approve / deny ------------------------------------------------------------------------------------


def _undecided(obj: dict[str, Any]) -> list[dict[str, Any]]:
    decisions = (obj.get("spec") or {}).get("decisions") or {}
    return [p for p in (obj.get("status") or {}).get("pendingApprovals") or [] if p["toolCallId"] not in decisions]


def _ask_yes(prompt: str) -> bool:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


async def decide(
    session: Session,
    plural: str,
    obj: dict[str, Any],
    approved: bool,
    *,
    ids: list[str],
    every: bool,
    reason: str | None,
    fmt: str | None = None,
) -> ExitCode:
    """Lists what waits, picks (ids, --all, or asks one by one on stdin), writes spec.decisions
    as the kubeconfig's user, each decision bound to the digest of the call that was shown."""
    name = obj["metadata"]["name"]
    pending = {p["toolCallId"]: p for p in _undecided(obj)}
    if ids:
        unknown = [i for i in ids if i not in pending]
        if unknown:
            raise UsageError(
                f"IDS: {', '.join(unknown)} not waiting for a decision in {name} "
                f"(waiting: {', '.join(pending) or 'none'})"
            )
        chosen = ids
    elif every:
        chosen = list(pending)
    else:
        if not pending:
            _out(f"nothing in {name} waits for a decision")
            return ExitCode.OK
        verb = "approve" if approved else "deny"
        chosen = []
        for call_id, call in pending.items():
            _out(f"{clean(call.get('toolName'))} — {clean(call.get('description') or '')}")
            _out(f"  params: {clean(json.dumps(call.get('params') or {}, default=str))}")
            if _ask_yes(f"{verb} {clean(call_id)}? [y/N] "):
                chosen.append(call_id)
    if not chosen:
        _out("nothing decided")
        return ExitCode.OK if not pending else ExitCode.AWAITING_APPROVAL
    decisions = {
        i: {"approved": approved, **({"reason": reason} if reason else {}), "digest": pending[i].get("digest") or None}
        for i in chosen
    }
    decisions = {i: {k: v for k, v in d.items() if v is not None} for i, d in decisions.items()}
    user = await session.whoami()
    await session.kube.patch(resource_path(plural, session.namespace, name), {"spec": {"decisions": decisions}})
    if fmt:
        dump({"name": name, "user": user, "decisions": decisions}, fmt)
    else:
        for i in chosen:
            _out(f"{'approved' if approved else 'denied'} {clean(i)} as {clean(user)}")
    return ExitCode.OK


async def decide_command(session: Session, args: argparse.Namespace) -> ExitCode:
    plural, obj = await session.resolve(args.name)
    return await decide(
        session,
        plural,
        obj,
        args.command == "approve",
        ids=args.ids,
        every=args.all,
        reason=args.reason,
        fmt=args.output,
    )


# -- ask -------------------------------------------------------------------------------------------


async def _ask_once(
    session: Session, question: str, name: str | None, args: argparse.Namespace
) -> tuple[str, ExitCode]:
    path = resource_path(CONVERSATION_PLURAL, session.namespace)
    if name is None:
        spec: dict[str, Any] = {"turns": [{"ask": question}], "enableToolApproval": not args.no_approval}
        if args.model:
            spec["model"] = args.model
        created = await session.kube.create(
            path,
            {
                "apiVersion": API_VERSION,
                "kind": CONVERSATION_KIND,
                "metadata": {"generateName": "chat-"},
                "spec": spec,
            },
        )
        name, turn = created["metadata"]["name"], 0
        if not args.output:
            _out(f"conversation/{name}")
    else:
        while True:  # optimistic concurrency: someone else may have asked meanwhile
            obj = await session.kube.get(f"{path}/{name}")
            turns = list((obj.get("spec") or {}).get("turns") or [])
            try:
                await session.kube.patch(
                    f"{path}/{name}",
                    {
                        "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                        "spec": {"turns": [*turns, {"ask": question}]},
                    },
                )
            except ApiException as exc:
                if exc.status == 409:
                    continue
                raise
            turn = len(turns)
            break
    while True:
        args.stop_at_approval = True
        code = await _follow(session, CONVERSATION_PLURAL, name, args, turn=turn)
        if code != ExitCode.AWAITING_APPROVAL or not sys.stdin.isatty():
            return name, code
        obj = await session.kube.get(f"{path}/{name}")
        await decide(session, CONVERSATION_PLURAL, obj, True, ids=[], every=False, reason=None)
        obj = await session.kube.get(f"{path}/{name}")
        if _undecided(obj):  # what was not approved is denied, so the turn can go on
            ids = [p["toolCallId"] for p in _undecided(obj)]
            await decide(
                session, CONVERSATION_PLURAL, obj, False, ids=ids, every=False, reason="declined at the prompt"
            )


async def ask(session: Session, args: argparse.Namespace) -> ExitCode:
    name = None
    if args.conversation:
        plural, obj = await session.resolve(f"conv/{args.conversation}")
        name = obj["metadata"]["name"]
    if args.question:
        return (await _ask_once(session, " ".join(args.question), name, args))[1]
    code = ExitCode.OK
    interactive = sys.stdin.isatty()
    while True:  # the REPL: one turn per line, in one Conversation
        if interactive:
            sys.stdout.write("ask> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line or line.strip() in ("exit", "quit"):
            return code
        if not line.strip():
            continue
        name, code = await _ask_once(session, line.strip(), name, args)


# -- transcript, list --------------------------------------------------------------------------------


async def transcript(session: Session, args: argparse.Namespace) -> ExitCode:
    plural, obj = await session.resolve(args.name)
    async with spinner("reading the transcript"):
        state = await Transcript(
            session.kube, session.namespace, view_of(obj).ref.owner, requester=view_of(obj).ref.requester
        ).load()
    items = timeline(state)
    if args.output:
        dump({"summary": run_summary(obj), "timeline": items}, args.output)
        return ExitCode.OK
    lines = [f"{obj['kind'].lower()}/{obj['metadata']['name']} in {session.namespace}"]
    for item in items:
        lines += item_lines(item, outputs=True)
    page("\n".join(lines))
    return ExitCode.OK


async def list_command(session: Session, args: argparse.Namespace) -> ExitCode:
    namespace = None if args.all_namespaces else session.namespace
    rows: list[dict[str, Any]] = []
    async with spinner("listing runs"):
        for plural in (INVESTIGATION_PLURAL, CONVERSATION_PLURAL):
            listing = await session.kube.get(resource_path(plural, namespace))
            kind = INVESTIGATION_KIND if plural == INVESTIGATION_PLURAL else CONVERSATION_KIND
            rows += [run_summary({"kind": kind, **item}) for item in listing.get("items", [])]
    rows.sort(key=lambda r: r["created"] or "", reverse=True)
    rows = rows[: args.limit]
    if args.output:
        dump([{k: v for k, v in r.items() if k not in ("answer", "sections")} for r in rows], args.output)
        return ExitCode.OK
    headers = [
        "KIND",
        "NAME",
        *(["NAMESPACE"] if namespace is None else []),
        "PHASE",
        "AGE",
        "TOOLS",
        "TOKENS",
        "COST",
        "TITLE",
    ]
    table_rows = [
        [
            "inv" if r["kind"] == INVESTIGATION_KIND else "conv",
            r["name"],
            *([r["namespace"]] if namespace is None else []),
            r["phase"],
            age(r["created"]),
            str(r["toolCallCount"]),
            str(r["usage"]["totalTokens"]),
            f"${r['usage']['cost']:.4f}",
            r["title"][:60],
        ]
        for r in rows
    ]
    _out(
        table(table_rows, headers) if rows else f"no investigations or conversations in {namespace or 'any namespace'}"
    )
    return ExitCode.OK


async def history(session: Session, args: argparse.Namespace) -> ExitCode:
    """Past findings (`lestrade.runs.history`) of the runs the kubeconfig's user may list."""
    namespace = None if args.all_namespaces else session.namespace
    try:
        query = SearchQuery(
            text=" ".join(args.query),
            namespace=args.resource_namespace,
            kind=args.kind,
            name=args.resource,
            alert=args.alert,
            since=parse_since(args.since),
            limit=max(1, min(args.limit, MAX_RESULTS)),
        )
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from None
    index = FindingsIndex()
    refused: list[ApiException] = []
    async with spinner("reading past runs"):
        for plural, kind in ((INVESTIGATION_PLURAL, INVESTIGATION_KIND), (CONVERSATION_PLURAL, CONVERSATION_KIND)):
            token = ""
            while True:  # a page at a time: only the findings are kept
                try:
                    page_ = await session.kube.get(
                        resource_path(plural, namespace), limit=500, **({"continue": token} if token else {})
                    )
                except ApiException as exc:
                    if exc.status != 403:
                        raise
                    refused.append(exc)  # the other kind may still be readable
                    print(f"kubectl lestrade history: may not list {plural}; searching without them", file=sys.stderr)
                    break
                index.add([{"kind": kind, **item} for item in page_.get("items", [])])
                token = (page_.get("metadata") or {}).get("continue") or ""
                if not token:
                    break
    if len(refused) == 2:
        raise refused[0]
    found = index.search(query)
    if args.output:
        dump(found, args.output)
        return ExitCode.OK
    if not found:
        _out(f"no past findings match in {namespace or 'any namespace'}")
        return ExitCode.OK
    for r in found:  # model-written and cluster text: terminal control characters stripped
        where = f"{'inv' if r['kind'] == INVESTIGATION_KIND else 'conv'}/{r['name']}"
        _out(
            clean(
                f"{where}{'' if namespace else ' -n ' + r['namespace']}  {r['phase']}  {r['age']} ago"
                f"{'  alert ' + r['alert'] if r['alert'] else ''}  {r['title'][:80]}"
            )
        )
        _out("  root cause: " + clean(r["rootCause"][:400]))
        if r["fix"]:
            _out("  fix: " + clean(r["fix"][:400]))
    return ExitCode.OK


COMMANDS = {
    "investigate": investigate,
    "follow": follow_command,
    "approve": decide_command,
    "deny": decide_command,
    "ask": ask,
    "transcript": transcript,
    "list": list_command,
    "history": history,
}
