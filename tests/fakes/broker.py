"""`route_to_cleanup`: deliveries as the broker routes them to register and cleanup, in any
order and at least once (the order and cleanup property tests share it)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from modelhooks.core.function import Function
from modelhooks.events.model import CanonicalEvent, ModelDeleted

__all__ = ["route_to_cleanup"]


def route_to_cleanup(
    events: Sequence[CanonicalEvent],
    register: Function,
    cleanup: Function,
    *,
    order: random.Random,
    duplicates: Sequence[int] = (),
) -> None:
    """Deliver `events`, each of `duplicates` (an index, modulo their number) once more,
    shuffled by `order`, as the broker routes them: each to register first, then a
    model.deleted to cleanup, register's model.deleted replies delivered onward."""
    queue = [*events, *(events[i % len(events)] for i in duplicates)]
    order.shuffle(queue)
    while queue:
        event = queue.pop(0)
        queue += [r for r in register.handle(event) if isinstance(r.data, ModelDeleted)]
        if isinstance(event.data, ModelDeleted):
            cleanup.handle(event)
