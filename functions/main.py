"""functions-framework targets: `functions-framework --target register` (Cloud Run
functions, or a Knative Service running the same image).

Each target is an `http` function that parses and answers CloudEvents itself, so it can
reply with a canonical event (a `cloud_event` function's return value is ignored).
Settings are checked and dependencies built when the module loads, so a bad setting
fails the revision at start-up (the platform keeps the previous one serving) instead of
answering 500 to every delivery; heavy SDKs still load only when an adapter needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import functions_framework

from modelhooks.bootstrap import build
from modelhooks.delivery.http import call_function, to_flask

if TYPE_CHECKING:
    import flask

__all__ = ["register", "sign"]


@functions_framework.http
def register(request: flask.Request) -> flask.Response:
    return to_flask(call_function("register", request, build()))


@functions_framework.http
def sign(request: flask.Request) -> flask.Response:
    return to_flask(call_function("sign", request, build()))


build()
