"""functions-framework targets: `functions-framework --target register` (Cloud Run
functions, or a Knative Service running the same image).

There is one target per function module in `modelhooks.handlers`, named after it. Each target
is an `http` function that parses and answers CloudEvents itself, so it can
reply with a canonical event (a `cloud_event` function's return value is ignored).
Settings are checked and the served function's dependencies built when the module loads
(`FUNCTION_TARGET`, which functions-framework sets first, names it: nothing another function
needs is built or imported), so a bad setting fails the revision at start-up (the platform
keeps the previous one serving) instead of answering 500 to every delivery; heavy SDKs still
load only when an adapter needs them.
"""

from __future__ import annotations

import gc

# Start-up allocates and frees next to nothing: the collector's passes over what importing and
# wiring make (2-3 ms of a cold start's CPU) wait until it is done, when gc.freeze() below
# takes all of it out of the collector's sight.
gc.disable()

try:
    import logging
    from collections.abc import Callable
    from typing import TYPE_CHECKING

    import functions_framework

    from modelhooks.bootstrap import build, hosted
    from modelhooks.core.logs import log
    from modelhooks.delivery.encoding import json_response
    from modelhooks.delivery.http import call_function, to_flask
    from modelhooks.handlers import NAMES
except BaseException:  # start-up fails: the collector as it was
    gc.enable()
    raise

if TYPE_CHECKING:
    import flask
    import flask.typing

__all__ = list(NAMES)  # one target per function module (modelhooks.handlers)


def _target(name: str) -> Callable[[flask.Request], flask.typing.ResponseReturnValue]:
    def target(request: flask.Request) -> flask.Response:
        if request.method == "GET" and request.path == "/healthz":  # as `modelhooks serve`
            return to_flask(json_response(200, {"status": "ok", "function": name}))
        return call_function(name, request, build().delivery)

    target.__name__ = target.__qualname__ = name
    return functions_framework.http(target)


for _name in NAMES:
    globals()[_name] = _target(_name)

try:
    _app = build()  # the hosted function's dependencies: a bad setting stops start-up
except BaseException:
    gc.enable()
    raise
log(
    logging.INFO,
    "modelhooks functions-framework targets ready",
    functions=list(hosted()),
    registry=_app.settings.registry.backend,
    store=_app.settings.store.backend,
)
# What start-up loaded lives as long as the process: out of the collector's way, a full
# collection walks only what deliveries made since (it walked all of it every few thousand
# deliveries, ~40 ms each: ~10 us of CPU per delivery, and a pause every thread waited on).
# Before gunicorn forks its worker, which keeps it frozen.
gc.freeze()
gc.enable()
