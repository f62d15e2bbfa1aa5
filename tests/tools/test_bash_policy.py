"""What the bash tool runs unattended, what waits for approval, and what never runs."""

from __future__ import annotations

import pytest

from lestrade.operator.tools.bash.parse import BashParseError, parse_command
from lestrade.operator.tools.bash.policy import evaluate_text


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get pods -n shop -o wide",
        "kubectl -n shop describe pod web-1",
        "kubectl logs web-1 -n shop --tail 50 | grep -i error | head -n 20",
        "kubectl get events -A --sort-by=.lastTimestamp | tail -n 30",
        "kubectl top pods -A",
        "kubectl get secrets -n shop",
        "kubectl get secrets -n shop -o name",
        "kubectl describe secret db -n shop",
        "kubectl get pods -o json | jq -r '.items[].metadata.name'",
        "kubectl get pods | awk '{print $1, $3}' | sort | uniq -c | sort -rn",
        "kubectl get pods | awk -F' ' '$4 > 3 {print $1}'",
        "kubectl get deploy -A | wc -l",
        "kubectl rollout status deploy/web -n shop",
        "kubectl get po 2>&1 | cut -d' ' -f1",
        "kubectl get po 2>/dev/null",
        "echo ok && date -u",
        "grep -e foo -e bar",
        # the grammars keep everyday troubleshooting unattended
        "kubectl get pods -o jsonpath='{.items[*].metadata.name}'",
        "kubectl get pods -A --field-selector=status.phase!=Running",
        "kubectl logs deploy/web --since=1h --timestamps --all-containers",
        "kubectl logs web-1 -c app --previous --tail=100",
        "kubectl get events -A --field-selector type=Warning --sort-by=.lastTimestamp",
        "kubectl top pod --containers -n shop",
        "kubectl auth can-i list pods --namespace shop",
        "kubectl api-resources --namespaced=true",
        "kubectl get pods --show-labels -l 'app in (web,api)'",
        "kubectl get pods -o wide --no-headers | awk '{print $7}' | sort | uniq -c",
        "kubectl explain pod.spec.containers --recursive",
        "kubectl get pods -o custom-columns=NAME:.metadata.name,STATUS:.status.phase",
        "kubectl rollout history deploy/web --revision=2",
        "kubectl get secrets -A -o wide",
        "kubectl get pod web -o json | jq '.spec.containers[].env'",
        "grep -E 'error|fatal' -i",
        "sort -t: -k2,2n",
        "tail -n +5",
        "jq -r '.items[] | [.metadata.name, .status.phase] | @tsv'",
        "jq --arg n web '.items[] | select(.metadata.name==$n)'",
        "column -t",
        "date -u '+%Y-%m-%dT%H:%M:%SZ'",
        "ls -la /tmp",
    ],
)
def test_read_only_commands_run_without_approval(command: str) -> None:
    line, verdict = evaluate_text(command)
    assert line is not None
    assert verdict.read_only, verdict.reason
    assert verdict.forbidden is None


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("kubectl delete pod web-1", "not a read-only"),
        ("kubectl apply -f x.yaml", "not a read-only"),
        ("kubectl edit deploy web", "not a read-only"),
        ("kubectl patch deploy web -p {}", "not a read-only"),
        ("kubectl scale deploy web --replicas=0", "not a read-only"),
        ("kubectl exec web-1 -- ls", "not a read-only"),
        ("kubectl rollout restart deploy/web", "not a read-only"),
        ("kubectl logs -f web-1", "-f"),
        ("kubectl get pods -w", "-w"),
        ("rm -rf /tmp/x", "allowlist"),
        ("mv a b", "allowlist"),
        ("curl http://example.com", "allowlist"),
        ("env", "allowlist"),
        ("cat /etc/passwd", "file"),
        ("grep root /etc/passwd", "file"),
        ("grep -r password .", "-r"),
        ("tail -f /dev/null", "-f"),
        ("sort -o out.txt", "-o"),
        ("awk '{system(\"rm x\")}'", "awk"),
        ("awk '{print > \"/tmp/out\"}'", "awk"),
        ("jq -n env", "jq"),
        ("kubectl get pods > /tmp/pods.txt", "redirection"),
        ("echo $(kubectl delete pod x)", "shell"),
        ("echo $HOME", "shell"),
        ("for p in a b; do echo $p; done", "shell"),
        ("(kubectl get pods)", "shell"),
        ("kubectl get pods &", "shell"),
        ("/bin/ls", "path"),
        ("echo 'unterminated", "parse"),
        ("grep *.log", "glob"),
    ],
)
def test_everything_else_needs_approval(command: str, why: str) -> None:
    _, verdict = evaluate_text(command)
    assert verdict.needs_approval
    assert verdict.forbidden is None
    assert why.lower() in verdict.reason.lower()


@pytest.mark.parametrize(
    "command",
    [
        "kubectl get secret db -o yaml",
        "kubectl get secret db -ojson",
        "kubectl get secrets -n shop -o=jsonpath='{.items[*].data}'",
        "kubectl get secret/db --output yaml",
        "kubectl get cm,secrets -A -o yaml",
        "kubectl get secrets.v1 db -o go-template='{{.data.password}}'",
        "kubectl get secret db --template '{{.data}}'",
        "kubectl get secret db -o custom-columns=P:.data.password",
        "kubectl get pods | kubectl get secret db -o yaml",
        "kubectl get --raw /api/v1/namespaces/shop/secrets/db",
        "kubectl config view --raw",
        "kubectl create token default",
        "cat /var/run/secrets/kubernetes.io/serviceaccount/token",
    ],
)
def test_reading_secret_data_is_forbidden(command: str) -> None:
    _, verdict = evaluate_text(command)
    assert verdict.forbidden
    assert not verdict.read_only


def test_parse_keeps_pipes_sequences_and_quotes() -> None:
    line = parse_command("""kubectl get po -n 'my ns' | grep "a b" && echo "x\\ny" || echo done; ls""")
    assert [len(p.stages) for p in line.pipelines] == [2, 1, 1, 1]
    assert line.operators == ["&&", "||", ";"]
    assert line.pipelines[0].stages[0].argv == ["kubectl", "get", "po", "-n", "my ns"]
    assert line.pipelines[0].stages[1].argv == ["grep", "a b"]
    assert line.pipelines[1].stages[0].argv == ["echo", "x\\ny"]  # bash keeps the backslash
    assert not line.unsupported


def test_parse_records_what_needs_a_shell() -> None:
    line = parse_command("X=1 echo $(date) ~/a {b,c} <(ls)")
    text = " ".join(line.unsupported)
    for fragment in ("assignment", "command substitution", "tilde", "brace", "process substitution"):
        assert fragment in text


def test_unparseable_text_raises() -> None:
    with pytest.raises(BashParseError):
        parse_command("echo 'open")
    with pytest.raises(BashParseError):
        parse_command("   ")
