"""The `bash` tool: parsed argv pipelines, per-program grammars, policy tiers, a Landlock sandbox.

No shell ever runs: `parse` turns a command line into argv pipelines with bashlex; `policy`
decides which parsed lines run unattended, which need a person and which never run; `grammar`
parses each program's options against its allowlist — `programs` for the filters, `kubectl` for
kubectl and what it must never do — and `paths` refuses arguments that reach credential files;
each pipeline stage's output is redacted before the next stage reads it (`tool`).

Children get an allowlisted environment (no model keys, no `KUBERNETES_SERVICE_*`, `HOME`
private) and confine themselves with Landlock before exec (`sandbox`): read only system folders
(minus `/etc/lestrade`, `/etc/kubernetes`, ...), PATH folders and the tools' folder; write only
in the private work folder; no `/proc`, `/var/run/secrets`, home, `/tmp`; TCP only to the API
server's port; no signals to the operator. Without Landlock (Linux < 5.13) the tool refuses to
run. Residual risks: TCP to the API server's *port* on any host is allowed, UDP is not
restricted, and Landlock does not cover connecting to pathname UNIX sockets.
"""
