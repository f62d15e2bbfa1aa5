"""What starts Investigations without a person: alerts (and, later, Events and schedules).

Shared by every trigger so they agree on matching, naming and limits:

- `alerts.py`: the alert as every source hands it over (labels, annotations, fingerprint,
  start), and its fingerprint when the source gives none;
- `matching.py`: an AlertRoute's matchers compiled to RE2 (linear time on hostile labels);
- `templates.py`: the route's Investigation template, checked and rendered in a sandbox;
- `naming.py`: the deterministic Investigation name per route, alert and dedup window, and
  the labels linking an Investigation to its route and alert;
- `reach.py`: which routes are honoured where (Own everywhere, Any in the API's namespace or
  where the admin allows), and why a route can never match;
- `dispatch.py`: the whole step for a batch of alerts — match, deduplicate, apply the limits
  with optimistic concurrency on the route's status, create, count, record resolutions.
"""

from lestrade.triggers.alerts import Alert, fingerprint_of
from lestrade.triggers.dispatch import Dispatcher, DispatchResult, RouteOutcome
from lestrade.triggers.matching import CompiledRoute, RouteError, compile_route
from lestrade.triggers.naming import (
    ALERT_FINGERPRINT_LABEL,
    ALERT_RESOLVED_ANNOTATION,
    ALERT_ROUTE_LABEL,
    ALERT_STARTS_AT_ANNOTATION,
    investigation_name,
)
from lestrade.triggers.reach import RoutePolicy, never_matches
from lestrade.triggers.templates import TemplateError, check_template, render_template

__all__ = [
    "Alert",
    "fingerprint_of",
    "CompiledRoute",
    "RouteError",
    "compile_route",
    "TemplateError",
    "check_template",
    "render_template",
    "investigation_name",
    "ALERT_ROUTE_LABEL",
    "ALERT_FINGERPRINT_LABEL",
    "ALERT_STARTS_AT_ANNOTATION",
    "ALERT_RESOLVED_ANNOTATION",
    "Dispatcher",
    "DispatchResult",
    "RouteOutcome",
    "RoutePolicy",
    "never_matches",
]
