"""Which namespaces a run may read, and the identities its tools act as.

Tools identity (`tools_identity`): the tools never use the operator's credentials. The operator
mints short-lived tokens (TokenRequest) for a read-only ServiceAccount
(`LESTRADE_TOOLS_SERVICE_ACCOUNT`; the chart's `<release>-tools` bound to `-tools-read`, never
Secrets; `lestrade run` creates `default/lestrade-tools` from the same rules,
`lestrade/localcluster/toolsaccount.py`) and gives the Kubernetes/runbook tools an ApiClient with
that token and bash's kubectl a kubeconfig for it in a private 0700 folder. Only the write tools
(always behind approval) use the operator's client. The bash tool's own confinement is in
`lestrade.operator.tools.bash.sandbox`.

Tenant isolation (README: "Who sees what"): the requester is recorded by
`lestrade.operator.admission.requester`; `scopes` decides a run's scope from its namespace, that
requester and the admin's grants (a ConfigMap, `LESTRADE_SCOPE_POLICY`); `scope_identity` makes
one ServiceAccount per distinct scope in `LESTRADE_SCOPES_NAMESPACE`, bound to the read-only
ClusterRole by a RoleBinding in each of the scope's namespaces, and mints its tokens (a
`ToolsIdentity`). The attempt records requester and scope in status and Events, tells the model
its scope, and builds the run's registry with that identity (`lestrade.operator.context`:
`ScopedTools` — Prometheus only for whole-cluster scopes, runbooks read as the cluster tools
account, write tools refuse other namespaces, and the Kubernetes tools' cross-namespace lists fan
out over the scope's namespaces, `tools.kubernetes.api.ScopedKubeApi`).
"""
