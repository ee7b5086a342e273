"""The in-process broker of `modelhooks serve` and `replay`: routes each canonical event to
every function whose Trigger matches, then routes their replies on (bounded depth), as the
Knative Broker does with replies in the cluster."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelhooks.core.function import Function
from modelhooks.core.logs import log
from modelhooks.delivery.runtime import Delivery, Outcome, entered, run
from modelhooks.events.model import CanonicalEvent

if TYPE_CHECKING:  # a function's own endpoint (functions-framework) routes by no Trigger
    from modelhooks.delivery.router import Trigger

__all__ = ["Broker", "single"]


_ROUTES = 1024  # routing decisions remembered (one per distinct set of values read)


class Broker:
    def __init__(self, triggers: Sequence[Trigger], delivery: Delivery, max_depth: int) -> None:
        self.triggers = tuple(triggers)
        self.delivery = delivery
        self.max_depth = max_depth
        # Whether a Trigger matches depends only on the attributes its filter reads (the
        # type, for every Trigger shipped): each decision is made once per distinct values
        # of those, not per event (every filter of every Trigger on every event and reply
        # was ~8 % of a delivery's CPU)
        self._reads = tuple(sorted({name for t in self.triggers for name in t.reads()}))
        self._routes: dict[tuple[str | None, ...], tuple[str, ...]] = {}

    def routes(self, event: CanonicalEvent) -> tuple[str, ...]:
        """The names of the functions whose Trigger matches `event`, in Trigger order."""
        attrs = event.attributes()
        key = tuple(attrs.get(name) for name in self._reads)
        names = self._routes.get(key)
        if names is None:
            names = tuple(dict.fromkeys(t.function for t in self.triggers if t.matches(attrs)))
            if len(self._routes) >= _ROUTES:  # bounded: values read may be unbounded
                self._routes.clear()
            self._routes[key] = names
        return names

    def functions_for(self, event: CanonicalEvent) -> list[Function]:
        return [self.delivery.function(name) for name in self.routes(event)]

    def publish(self, event: CanonicalEvent) -> list[Outcome]:
        """Route an event from outside (an HTTP delivery, the store watcher, a replay) and
        the replies it leads to."""
        if not self.routes(event):
            return []
        named = entered(event, self.delivery)
        return [named] if isinstance(named, Outcome) else self._route(named, 0)

    def _route(self, event: CanonicalEvent, depth: int) -> list[Outcome]:
        outcomes = []
        for fn in self.functions_for(event):
            outcome = run(fn, event, self.delivery)
            outcomes.append(outcome)
            for reply in outcome.replies:
                if depth + 1 >= self.max_depth:
                    log(logging.WARNING, "reply chain too deep; not routed", event_id=reply.id)
                    continue
                outcomes.extend(self._route(reply, depth + 1))
        return outcomes


def single(fn: Function, delivery: Delivery, event: CanonicalEvent) -> list[Outcome]:
    """A function endpoint: events of types it does not accept are acknowledged, unrun."""
    if event.type not in fn.accepts:
        return []
    named = entered(event, delivery, fn.name)
    return [named] if isinstance(named, Outcome) else [run(fn, named, delivery)]
