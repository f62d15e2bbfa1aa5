"""What starts runs without a person: schedules and Kubernetes Warning Events.

`schedules` runs a Kopf daemon per ScheduledInvestigation (CronJob semantics: the latest due
time only, starting deadline, concurrency policy, history; children named
`<schedule>-<unix time>` and owned by it). `event_source` watches Warning Events, batches them
and hands them to `lestrade.triggers.Dispatcher` for the AlertRoutes with source
KubernetesEvents (matching, naming and limits are shared with the API's Alertmanager receiver
in `lestrade.triggers`).
"""
