"""`kubectl lestrade COMMAND`: the command line (kubectl finds `kubectl-lestrade` on PATH).

    kubectl lestrade investigate --title "web-1 crashloops" --subject pod/web-1
    kubectl lestrade investigate --alert alert.json
    kubectl lestrade follow NAME            # exit 0 done, 1 failed, 3 waiting (--stop-at-approval)
    kubectl lestrade approve NAME [ID ...] [--all]   /  deny NAME [ID ...] [--all] [--reason ...]
    kubectl lestrade ask "why is web-1 restarting?"  /  ask (a REPL)  /  ask -c NAME "and now?"
    kubectl lestrade transcript NAME
    kubectl lestrade list [-A]

Exit codes (`commands.ExitCode`): 0 done, 1 the run failed, 2 bad usage, 3 waiting for
approval, 4 not found, 5 refused by the cluster, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from kubernetes.config.config_exception import ConfigException

from lestrade.kube import ApiException
from lestrade.plugin.commands import COMMANDS, ExitCode, UsageError
from lestrade.plugin.follow import Gone
from lestrade.plugin.session import NotFound, Session

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context")
    common.add_argument("-o", "--output", choices=["json", "yaml"], help="machine-readable output")

    top = argparse.ArgumentParser(prog="kubectl lestrade", description="Lestrade investigations and conversations.")
    sub = top.add_subparsers(dest="command", required=True)

    inv = sub.add_parser(
        "investigate", parents=[common], help="start an investigation (flags or an alert), then follow it"
    )
    inv.add_argument("--title")
    inv.add_argument("--description")
    inv.add_argument("--question")
    inv.add_argument("--subject", help="KIND/NAME, e.g. pod/web-1")
    inv.add_argument("--subject-namespace", help="namespace of the subject (default: -n)")
    inv.add_argument("--alert", help="an Alertmanager alert or webhook payload, as JSON (a file, or - for stdin)")
    inv.add_argument("--model")
    inv.add_argument("--max-steps", type=int)
    inv.add_argument("--timeout", help="e.g. 10m")
    inv.add_argument("--name", help="name of the Investigation (default: generated)")
    inv.add_argument("--no-approval", action="store_true", help="refuse calls that need approval instead of pausing")
    inv.add_argument("--no-follow", action="store_true", help="create and return")
    inv.add_argument("--stop-at-approval", action="store_true", help="exit 3 when the run waits for approval")

    fol = sub.add_parser("follow", parents=[common], help="live progress of a run until it ends")
    fol.add_argument("name", help="NAME, inv/NAME or conv/NAME")
    fol.add_argument("--turn", type=int, help="Conversation turn (0-based; default: the last)")
    fol.add_argument("--stop-at-approval", action="store_true", help="exit 3 when the run waits for approval")

    for verb in ("approve", "deny"):
        dec = sub.add_parser(verb, parents=[common], help=f"{verb} tool calls that wait for a decision")
        dec.add_argument("name", help="NAME, inv/NAME or conv/NAME")
        dec.add_argument("ids", nargs="*", help="tool call ids (default: list them and ask)")
        dec.add_argument("--all", action="store_true", help=f"{verb} every waiting call")
        dec.add_argument("--reason", help="why (shown to the model)")

    ask = sub.add_parser("ask", parents=[common], help="ask a question (a Conversation turn); a REPL without one")
    ask.add_argument("question", nargs="*")
    ask.add_argument("-c", "--conversation", help="continue this Conversation")
    ask.add_argument("--model")
    ask.add_argument("--no-approval", action="store_true")

    tr = sub.add_parser("transcript", parents=[common], help="the whole run, paged")
    tr.add_argument("name", help="NAME, inv/NAME or conv/NAME")

    ls = sub.add_parser("list", parents=[common], help="recent runs with their cost")
    ls.add_argument("-A", "--all-namespaces", action="store_true")
    ls.add_argument("--limit", type=int, default=50)

    hist = sub.add_parser(
        "history", parents=[common], help="past findings: root causes and fixes of finished runs, best match first"
    )
    hist.add_argument("query", nargs="*", help="free text, ranked (e.g. OOMKilled memory)")
    hist.add_argument("-A", "--all-namespaces", action="store_true")
    hist.add_argument("--kind", help="kind of the involved resource, e.g. Deployment")
    hist.add_argument("--resource", help="name of the involved resource (also matches what it owns)")
    hist.add_argument("--resource-namespace", help="namespace of the involved resource")
    hist.add_argument("--alert", help="alert name")
    hist.add_argument("--since", help="finished within, e.g. 24h or 7d, or after an RFC 3339 time")
    hist.add_argument("--limit", type=int, default=10)
    return top


async def _run(args: argparse.Namespace) -> int:
    session = Session.open(args.kubeconfig, args.context, args.namespace)
    try:
        return int(await COMMANDS[args.command](session, args))
    finally:
        await session.close()


def _refusal(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except UsageError as exc:
        print(f"kubectl lestrade {args.command}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except (NotFound, Gone) as exc:
        print(f"kubectl lestrade {args.command}: {exc}", file=sys.stderr)
        return ExitCode.NOT_FOUND
    except ApiException as exc:
        print(f"kubectl lestrade {args.command}: the cluster refused ({exc.status}): {_refusal(exc)}", file=sys.stderr)
        return ExitCode.NOT_FOUND if exc.status == 404 else ExitCode.REFUSED
    except KeyboardInterrupt:
        print("\ninterrupted (the run goes on in the cluster)", file=sys.stderr)
        return 130
    except ConfigException as exc:
        print(f"kubectl lestrade: no usable kubeconfig: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except FileNotFoundError as exc:
        print(f"kubectl lestrade {args.command}: {exc}", file=sys.stderr)
        return ExitCode.USAGE


if __name__ == "__main__":
    sys.exit(main())
