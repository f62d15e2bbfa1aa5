"""The README is executed: every shell command of its quick starts ("Quickstart with kubectl",
"Quickstart with HTTP") runs as written against `make run` with the demo model, and answers as
the README says. A command nobody wrote an expectation for fails the test, so the README and the
code cannot drift apart silently.

The only edits to a command: `localhost:8080` becomes the API's port of this run, and commands
whose arguments are placeholders the reader fills in (`NAME`, `CALL_ID`, `RELAY_ID`) are not
run (they are listed in TEMPLATES, and the test fails if one is missing from the README or an
unlisted one appears). Watches (`kubectl get ... -w`) run until the state the README names.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_make_run import REPO, Run, _make_run

README = REPO / "README.md"
QUICKSTARTS = ("## Quickstart with kubectl", "## Quickstart with HTTP (HolmesGPT-compatible)")
TEMPLATES = {  # commands with placeholders, shown for the reader to fill in
    "kubectl get inv NAME -o jsonpath='{.status.pendingApprovals}'",
    'kubectl patch inv NAME --type merge -p \'{"spec":{"decisions":{"CALL_ID":{"approved":true}}}}\'',
    'curl -s -H "$J" localhost:8080/chat/relay/RELAY_ID -d \'{"sessionId": "harness-...", "response": {"approved": true, "always": true}}\'',
}


def commands(readme: str) -> list[str]:
    """The quick starts' shell commands, in order: ```bash blocks, a command continued over
    lines by a backslash or an open quote kept whole, comments dropped."""
    found: list[str] = []
    for heading in QUICKSTARTS:
        section = readme.split(heading, 1)[1].split("\n## ", 1)[0]
        for block in re.findall(r"```bash\n(.*?)```", section, re.S):
            pending = ""
            for line in block.splitlines():
                pending = f"{pending}\n{line}" if pending else line
                try:
                    words = shlex.split(pending, comments=True)
                except ValueError:
                    continue  # an open quote: the command goes on
                if pending.rstrip().endswith("\\"):
                    continue
                if words:
                    found.append(_without_comment(pending).strip())
                pending = ""
    return found


def _without_comment(command: str) -> str:
    """The command without its trailing `# ...` (outside quotes)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=False)
    lexer.whitespace_split, lexer.commenters = True, "#"
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i]
    return command


def comment_of(readme: str, command: str) -> str:
    """The README's comment on a command's line: what it says the command answers."""
    first = command.splitlines()[0]
    for line in readme.splitlines():
        if line.startswith(first) and "#" in line[len(first) :]:
            return line[len(first) :].split("#", 1)[1].strip()
    return ""


class Shell:
    """Runs README commands as a user would in the checkout of a `make run`: exports carry over."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.exports: list[str] = []
        self.env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
        self.env.update(HOME=str(run.home), KUBECACHEDIR=str(run.kubecachedir))

    def _script(self, command: str) -> str:
        command = command.replace("localhost:8080", f"localhost:{self.run.port}")
        return "\n".join([*self.exports, command])

    def __call__(self, command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        if command.startswith("export ") or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", command):
            self.exports.append(command)  # exports and shell variables (J=...) carry over
        return subprocess.run(
            ["bash", "-c", self._script(command)],
            cwd=self.run.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def until(self, command: str, done: Callable[[str], bool], timeout: float = 240) -> str:
        """A watch: its output until `done` holds (the watch is ended then), or a failure."""
        proc = subprocess.Popen(
            ["bash", "-c", self._script(command)],
            cwd=self.run.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        seen = ""
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # ends when the watch does (the apiserver ends it, or kill below)
                seen += line
                if done(seen):
                    return seen
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        raise AssertionError(f"{command!r} ended before the README's state:\n{seen}")


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def sse_events(text: str) -> list[str]:
    return re.findall(r"^event: ?(\S+)", text, re.M)


def json_of(text: str) -> dict:
    value = json.loads(text)
    assert isinstance(value, dict), text
    return value


# Each command of the quick starts, by how it starts, and what the README says it answers.
def expectations(shell: Shell, readme: str) -> dict[str, Callable[[str], None]]:
    def crds(c: str) -> None:
        out = ok(shell(c))
        for name in comment_of(readme, c).split(", "):
            if name.strip() != "...":  # the README may list a few and end with "..."
                assert name in out, out

    def readyz(c: str) -> None:
        assert json_of(ok(shell(c)))["status"] == "ready"

    def inv_watch(c: str) -> None:
        final = comment_of(readme, c).split("→")[-1].strip()  # Pending → Running → Succeeded
        shell.until(c, lambda seen: re.search(rf"inventory-api-crashloop\s+{final}\b", seen) is not None)

    def analysis(c: str) -> None:
        assert "Demo model" in ok(shell(c)) or len(ok(shell(c))) > 40

    def conv_wait(c: str) -> None:
        assert "condition met" in ok(shell(c, timeout=200))

    def answer(c: str) -> None:
        assert ok(shell(c)).strip()

    def conv_watch(c: str) -> None:
        # Asked / Answered columns, phase of the latest turn: the follow-up is answered too
        shell.until(c, lambda seen: re.search(r"ask-about-the-cluster\s+Answered\s+2\s+2\b", seen) is not None)

    def models(c: str) -> None:
        assert json_of(ok(shell(c)))["model_name"]

    def info(c: str) -> None:
        body = json_of(ok(shell(c)))
        assert body["version"] and body["auth"]["enabled"] is False and body["models"]
        assert {t["name"]: t["status"] for t in body["toolsets"]}["kubernetes"] == "healthy", body

    def chat(c: str) -> None:
        body = json_of(ok(shell(c)))
        assert body["analysis"] and body["conversation_id"] and body["metadata"]["request_id"]

    def chat_stream(c: str) -> None:
        events = sse_events(ok(shell(c)))
        assert events and events[-1] == "ai_answer_end", events

    def hosted(c: str) -> None:
        assert json_of(ok(shell(c)))["analysis"]

    def context_put(c: str) -> None:
        assert json_of(ok(shell(c)))["id"] == "support-1"

    def context_message(c: str) -> None:
        assert "version" in json_of(ok(shell(c)))

    def context_reads(c: str) -> None:
        out = ok(shell(c))
        assert "Note this." in out, out

    def harness(c: str) -> None:
        out = ok(shell(c, timeout=240))
        events = sse_events(out)
        assert events[0] == "connected" and "harness_end" in events and "error" not in events, out

    def applied(c: str) -> None:
        ok(shell(c))

    return {
        "export KUBECONFIG=": applied,
        "export PATH=": applied,
        "J=": applied,
        "kubectl get crd": crds,
        "kubectl get lestrade": applied,
        "curl -s localhost:8080/readyz": readyz,
        "kubectl apply -f examples/crashloop.yaml": applied,
        "kubectl get inv -w": inv_watch,
        "kubectl get inv inventory-api-crashloop -o jsonpath": analysis,
        "kubectl apply -f examples/conversation.yaml": applied,
        "kubectl wait conv": conv_wait,
        "kubectl get conv ask-about-the-cluster -o jsonpath": answer,
        "kubectl patch conv": applied,
        "kubectl get conv -w": conv_watch,
        "curl -s localhost:8080/api/model": models,
        "curl -s localhost:8080/api/info": info,
        "curl -s localhost:8080/api/chat": chat,
        "curl -sN localhost:8080/api/chat": chat_stream,
        "curl -s localhost:8080/api/holmes/": hosted,
        "curl -s -X PUT localhost:8080/v1/contexts/": context_put,
        "curl -s localhost:8080/v1/contexts/support-1/messages": context_message,
        "curl -s 'localhost:8080/v1/contexts/support-1/tail": context_reads,
        "curl -sN localhost:8080/chat ": harness,
    }


@pytest.fixture(scope="module")
def running_readme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("readme")
    (workdir / "examples").symlink_to(REPO / "examples")  # the commands name examples/...
    yield from _make_run(workdir)


@pytest.mark.timeout(900)
def test_every_quickstart_command_answers_as_the_readme_says(running_readme: Run) -> None:
    readme = README.read_text()
    found = commands(readme)
    templates = [c for c in found if c in TEMPLATES]
    assert sorted(templates) == sorted(TEMPLATES), "a placeholder command changed: update TEMPLATES"
    shell = Shell(running_readme)
    checks = expectations(shell, readme)
    ran = []
    for command in found:
        if command in TEMPLATES:
            continue
        # `-H "$J"` (the JSON Content-Type the README's curl commands send) does not change what is asked
        plain = command.replace(' -H "$J"', "")
        check = next((f for prefix, f in checks.items() if plain.startswith(prefix)), None)
        assert check is not None, f"the README's {command!r} has no expectation in this test: add one"
        check(command)
        ran.append(command)
    assert len(ran) >= 19, ran  # every quick-start command but the templates ran
    # the harness example sends "model": "default"
    assert any('"model": "default"' in c for c in ran)


def test_commands_are_read_as_a_shell_reads_them() -> None:
    text = "```bash\nexport A=1  # note\ncurl -s x -d '{\"a\": 1,\n  \"b\": 2}'\nkubectl patch c \\\n  -p 'x'   # why\n```\n"
    assert commands(f"## Quickstart with kubectl\n{text}\n## Quickstart with HTTP (HolmesGPT-compatible)\n") == [
        "export A=1",
        'curl -s x -d \'{"a": 1,\n  "b": 2}\'',
        "kubectl patch c \\\n  -p 'x'",
    ]


def header_commands(example: Path) -> list[str]:
    """The commands an example's header comment shows (`#   kubectl ...`), comments dropped."""
    return [_without_comment(m).strip() for m in re.findall(r"^#   (kubectl .+)$", example.read_text(), re.M)]


@pytest.mark.timeout(600)
def test_the_alert_route_example_works_as_its_header_says(running_readme: Run) -> None:
    shell = Shell(running_readme)
    shell("export KUBECONFIG=$PWD/.lestrade/kubeconfig")
    shell("export PATH=$PWD/.lestrade/bin:$PATH")
    ok(shell("kubectl create namespace shop"))
    apply, get_routes, get_investigations = header_commands(REPO / "examples" / "alertroute.yaml")
    assert apply == "kubectl apply --server-side -n shop -f examples/alertroute.yaml"
    ok(shell(apply))
    # the operator says at once that the route can match
    shell.until(f"{get_routes} -w", lambda seen: re.search(r"crashlooping-pods\s+True\s+Valid\b", seen) is not None)
    alert = {
        "version": "4",
        "status": "firing",
        "receiver": "lestrade",
        "alerts": [
            {
                "status": "firing",
                "fingerprint": "00000000000000aa",
                "startsAt": "2026-11-26T03:00:00Z",
                "labels": {
                    "alertname": "KubePodCrashLooping",
                    "severity": "warning",
                    "namespace": "shop",
                    "pod": "web-1",
                    "container": "app",
                },
                "annotations": {"description": "web-1 keeps restarting"},
            }
        ],
    }
    # as Alertmanager sends it: a JSON body that says so (the API refuses others with auth off)
    posted = ok(
        shell(
            "curl -s -H 'Content-Type: application/json' localhost:8080/api/alertmanager "
            f"-d {shlex.quote(json.dumps(alert))}"
        )
    )
    assert json_of(posted)["created"] == 1, posted
    listing = ok(shell(get_investigations))
    assert len(listing.splitlines()) == 2 and "crashlooping-pods" in listing.splitlines()[1], listing
    routes = ok(shell(get_routes))
    assert re.search(r"crashlooping-pods\s+True\s+Valid\s+1\s+1\b", routes), routes
