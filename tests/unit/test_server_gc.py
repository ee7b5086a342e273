"""`modelhooks serve` takes what start-up built out of the garbage collector's sight before
it answers: a full collection otherwise walked every module, class and adapter, stopping
every delivery in flight (tens of ms on a loaded machine)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from modelhooks.delivery import server
from modelhooks.delivery.encoding import json_response


def test_start_up_is_frozen_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    frozen: list[int] = []

    def capture(self: Any, sockets: list[Any]) -> None:
        frozen.append(gc.get_freeze_count())
        for sock in sockets:
            sock.close()

    monkeypatch.setattr(uvicorn.Server, "run", capture)
    gc.unfreeze()
    try:
        server.run(lambda *_: json_response(200, {}), host="127.0.0.1", port=0)
    finally:
        gc.unfreeze()
    assert frozen and frozen[0] > 0
