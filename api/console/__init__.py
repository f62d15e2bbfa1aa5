"""The web console: static pages and the small JSON/SSE API they use.

`routes`: `/` and `/console/*` are static (the `*.js`, `*.html` and `*.css` files beside this
module), public (they hold no data) and served with a strict Content-Security-Policy.
`/api/console/runs` lists the runs of the namespaces where the caller may `list` them, from the
shared watches; `/api/console/runs/{plural}/{ns}/{name}` gives a run's summary and timeline
(`lestrade.runs.summary`); `/api/console/events` is one SSE stream of list rows per open page.
Writes are reviewed and then made as the caller (`writer_for`). The pages (plain ES modules, no
build step, nothing from a CDN) build the DOM with text nodes only: model output and cluster
data are never parsed as HTML.
"""
