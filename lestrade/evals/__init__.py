"""The investigation scenario suite (`make eval`; README "Evaluating investigations").

`scenario` loads a folder of `eval/scenarios/` (the ask, the root cause, the evidence facts,
the reference plan, the simulated data). `staging` puts it on the local control plane in its
own namespace: objects as written, a Pod's recorded `status` through KWOK's
`lestrade-pod-status` stage, other status through the status subresource, logs as KWOK `Logs`,
Events, cluster-scoped objects; `metrics` serves recorded series to a real Prometheus. `runner`
starts one operator (the product's, with its tools, as the read-only tools account) for a whole
run, waits until the plan's raw tool outputs show the evidence, and runs each scenario as an
Investigation. In scripted mode `script` turns the plan into a script for the scripted model
server and `recall` reads what the model server received: a fact is covered when it reached the
model's input, else it is attributed to where it was lost; `table` prints the result. In model
mode `judge` asks a judge model for a verdict and writes the reports. Product code does not
import this package.
"""
