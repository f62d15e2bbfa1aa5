"""The web console in a real browser (headless Debian chromium via Playwright) against the
running stack: API with authentication, the real operator, the real control plane. Two users
with real ServiceAccount tokens: one who may decide, one who may only look."""

from __future__ import annotations

import re
from typing import Any

from consolekit import browser, shot, signed_in
from opkit import EFFECT_LABEL, count_effects
from playwright.sync_api import expect
from test_auth_api import grant

from lestrade.localcluster.processes import wait_until
from lestrade.modelserver import Scenario, Step, ToolCall

HOSTILE_ANSWER = (
    "## Root cause\nThe **memory** limit of `web-1` is too low. [evidence: fix-1]\n\n"
    "- raise it to 512Mi [evidence: call_forged]\n- see [the docs](https://kubernetes.io/docs/)\n\n"
    '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script> [click](javascript:window.pwned=3)'
)


def test_a_run_appears_and_progresses_live_and_only_an_authorized_click_resumes_it(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    tag = scenario_name
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(
                    tool_calls=[ToolCall(id="fix-1", name="apply_fix", arguments={"namespace": namespace, "tag": tag})]
                ),
                Step(content=HOSTILE_ANSWER),
            ],
        )
    )
    everything = ["create", "get", "list", "watch", "patch"]
    grant(api_client, namespace, "approver", [("investigations", everything), ("conversations", everything)])
    grant(
        api_client,
        namespace,
        "viewer",
        [("investigations", ["create", "get", "list"]), ("conversations", ["get", "list"])],
    )
    s = stack(scenario_name, auth=True)
    approver, viewer = cluster.token_for(namespace, "approver"), cluster.token_for(namespace, "viewer")
    with s.client() as http:
        for token in (approver, viewer):
            wait_until(
                "RBAC to allow",
                lambda t=token: http.get("/api/whoami", headers={"Authorization": f"Bearer {t}"}).status_code == 200,
                30,
            )

    errors: list[str] = []
    with browser() as chromium:
        watcher = signed_in(chromium, s.base, viewer, errors)  # sits on the list, never reloads
        expect(watcher.locator("#live.on")).to_be_visible()  # the live stream is open
        watcher.evaluate("window.sameDocument = true")  # gone if the page were ever reloaded
        expect(watcher.locator("#runs")).to_be_visible()

        page = signed_in(chromium, s.base, approver, errors)
        page.click("text=New investigation")
        page.fill("input[name=title]", "web-1 is crashlooping")
        page.fill("input[name=subjectName]", "web-1")
        page.click("#new-investigation button[type=submit]")
        expect(page.locator("#run-title")).to_have_text("web-1 is crashlooping")
        name = page.url.rsplit("/", 1)[1]

        # The run shows up in the other user's list, and its phase changes there, live.
        row = watcher.locator(f"tr[data-key='investigations/{namespace}/{name}']")
        expect(row).to_contain_text("AwaitingApproval")
        expect(row).to_contain_text("1 waiting")
        assert watcher.evaluate("window.sameDocument") is True

        # The approver's page paused live, with the call and its parameters.
        pending = page.locator("#approvals .pending[data-call='fix-1']")
        expect(pending).to_contain_text("apply_fix")
        expect(pending).to_contain_text(tag)
        shot(page, "run-awaiting-approval")

        # The viewer sees the call; their click is refused by RBAC and changes nothing.
        watcher.click(f"a[href='#/run/investigations/{namespace}/{name}']")
        expect(watcher.locator("#approvals")).to_contain_text("may not decide")
        watcher.click("#approvals button.approve")
        expect(watcher.locator("#approvals .note")).to_contain_text(
            f"system:serviceaccount:{namespace}:viewer may not patch investigations"
        )
        shot(watcher, "approval-refused")
        inv = api_client_get(api_client, namespace, name)
        assert "decisions" not in inv["spec"]
        assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 0

        # The approver's click resumes the run; both pages follow it to the end without a reload.
        page.click("#approvals button.approve")
        expect(page.locator("#approvals .note")).to_contain_text(f"as system:serviceaccount:{namespace}:approver")
        expect(page.locator(".bar .phase")).to_have_text("Succeeded")
        expect(watcher.locator(".bar .phase")).to_have_text("Succeeded")
        assert watcher.evaluate("window.sameDocument") is True  # followed live, not reloaded
        analysis = page.locator("#analysis")
        expect(analysis.locator("h4", has_text="Root cause")).to_be_visible()  # "##" under the page's own h3
        expect(analysis.locator("strong")).to_have_text("memory")
        expect(analysis.locator("a[href='https://kubernetes.io/docs/']")).to_have_text("the docs")
        # Hostile markup is shown as text, never run: no element made from it, no script ran.
        expect(analysis).to_contain_text("<script>window.pwned=2</script>")
        assert analysis.locator("img, script").count() == 0
        assert analysis.locator("a[href^='javascript']").count() == 0
        assert page.evaluate("window.pwned") is None
        tool = page.locator("details.tool[data-call='fix-1']")
        expect(tool).to_contain_text("success")
        tool.locator("summary").click()
        expect(tool.locator("pre.output")).to_have_text(f"fix {tag} applied")
        expect(page.locator("#tokens")).to_have_text(re.compile(r"^[1-9]\d* tokens$"))
        # Grounded findings: each with the calls it cites; a forged or missing citation is flagged.
        findings = page.locator("#findings")
        expect(findings.locator("h3")).to_have_text("Findings (1/3 grounded)")
        expect(findings.locator(".finding.grounded")).to_contain_text("limit of web-1 is too low")
        expect(findings.locator(".finding.ungrounded").first).to_contain_text(
            "cites calls the run never made: call_forged"
        )
        tool.locator("summary").click()  # closed again; the citation opens it
        findings.locator(".finding.grounded a.cite[data-call='fix-1']").click()
        expect(tool.locator("pre.output")).to_be_visible()
        assert findings.locator("img, script").count() == 0 and page.evaluate("window.pwned") is None
        shot(page, "run-succeeded")
        watcher.click("text=Runs")
        expect(watcher.locator(f"tr[data-key='investigations/{namespace}/{name}']")).to_contain_text("Succeeded")
        shot(watcher, "runs")
    assert api_client_get(api_client, namespace, name)["spec"]["decisions"]["fix-1"]["approved"] is True
    assert count_effects(api_client, namespace, EFFECT_LABEL, tag) == 1
    assert errors == []


def test_a_conversation_round_trip(
    stack: Any,
    model_server: Any,
    scenario_name: str,
    namespace: str,
    api_client: Any,
    cluster: Any,
) -> None:
    model_server.add_scenario(
        Scenario(
            name=scenario_name,
            steps=[
                Step(content="The pod **web-1** restarts because it runs out of memory."),
                Step(content="Raise the limit to 512Mi."),
            ],
        )
    )
    everything = ["create", "get", "list", "watch", "patch"]
    grant(api_client, namespace, "chatter", [("investigations", everything), ("conversations", everything)])
    s = stack(scenario_name, auth=True)
    token = cluster.token_for(namespace, "chatter")
    with s.client() as http:
        wait_until(
            "RBAC to allow",
            lambda: http.get("/api/whoami", headers={"Authorization": f"Bearer {token}"}).status_code == 200,
            30,
        )
    errors: list[str] = []
    with browser() as chromium:
        page = signed_in(chromium, s.base, token, errors)
        page.click("text=New chat")
        page.fill("textarea[name=ask]", "Why does web-1 restart?")
        page.click("#new-chat button[type=submit]")
        expect(page.locator(".msg.answer").first).to_contain_text("runs out of memory")
        expect(page.locator(".msg.answer strong").first).to_have_text("web-1")
        # what the person asked, not the prompt around it; that prompt one click away
        expect(page.locator(".msg.user > .text").first).to_have_text("Why does web-1 restart?")
        prompt = page.locator(".msg.user details.prompt pre").first
        expect(prompt).to_be_hidden()
        page.locator(".msg.user details.prompt summary").first.click()
        expect(prompt).to_be_visible()
        expect(prompt).to_contain_text("Why does web-1 restart?")
        expect(prompt).to_contain_text("Current time:")
        page.fill("#ask textarea", "What should I do?")
        page.click("#ask button")
        expect(page.locator(".msg.answer")).to_have_count(2)
        expect(page.locator(".msg.answer").nth(1)).to_contain_text("Raise the limit to 512Mi.")
        expect(page.locator(".msg.user")).to_have_count(2)
        expect(page.locator(".msg.assistant")).to_have_count(0)  # each answer shown once, as the answer
        expect(page.locator("#ask textarea")).to_have_value("")
        expect(page.locator(".bar .phase")).to_have_text("Answered")
        shot(page, "chat")
    assert errors == []


def api_client_get(api_client: Any, namespace: str, name: str) -> dict[str, Any]:
    from opkit import get_inv

    return get_inv(api_client, namespace, name)
