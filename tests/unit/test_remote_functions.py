"""`serve` as the Broker of functions that run elsewhere (router.subscribers): each event
the Triggers route to a subscriber is POSTed to it, its replies are routed on, and what it
answers keeps its meaning (a reply, a skip, a refusal, a transient failure)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modelhooks.adapters.model_registry.sqlite import SqliteModelRegistry
from modelhooks.bootstrap import build
from modelhooks.core.errors import ConfigError
from modelhooks.core.settings import load_settings
from modelhooks.delivery.encoding import answer_reason
from modelhooks.delivery.http import routes
from modelhooks.delivery.remote import subscribers
from modelhooks.events.model import ArtifactPushed, CanonicalEvent
from tests.fakes.memory_registry import InMemoryModelRegistry
from tests.local_store import lay_model
from tests.servers._proc import free_port
from tests.unit.signing_material import make_key

Handle = Callable[[str, str, dict[str, str], bytes], Any]


def _server(handle: Handle) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = handle("POST", self.path, dict(self.headers), body)
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def functions_host(home: Path) -> Iterator[str]:
    """Every function of `modelhooks serve` on a real HTTP server of its own (as the
    function Pods are), its registry SQLite in `home`."""
    app = build(load_settings({"home": str(home)}, env={}))
    yield from _server(routes(app.broker()))


def _pushed(home: Path, model: str) -> CanonicalEvent:
    lay_model(home, "models", f"models/{model}/1", content=model.encode())
    data = ArtifactPushed(
        model=model, version="1", uri=f"gs://models/models/{model}/1/", digest="", store="gcs"
    )
    return CanonicalEvent.new(data, source="test", id=f"push-{model}")


def _broker(home: Path, spec: str, **settings: str) -> Any:
    """A broker whose own registry is in memory: what its subscribers registered is in the
    host's SQLite registry, what it ran in-process is not."""
    args = {"home": str(home), "router.subscribers": spec, **settings}
    return build(load_settings(args, env={}), registry=InMemoryModelRegistry())


def _summary(outcomes: list[Any]) -> list[tuple[str, str, int, list[str]]]:
    return [(o.function, o.event_type, o.status, [r.type for r in o.replies]) for o in outcomes]


def test_the_chain_through_subscribers_is_the_chain_in_process(
    home: Path, functions_host: str
) -> None:
    remote = _broker(home, f"register={functions_host}/functions/register;"
                     f"notify={functions_host}/functions/notify")  # fmt: skip
    through = remote.broker().publish(_pushed(home, "over-http"))
    local = build(load_settings({"home": str(home)}, env={}))
    in_process = local.broker().publish(_pushed(home, "in-process"))
    assert _summary(through) == _summary(in_process)
    assert [o.function for o in through][:1] == ["register"]
    assert through[0].replies[0].type == "dev.modelhooks.model.registered"
    registered = SqliteModelRegistry(home / "registry.db")  # by the host, not the broker
    assert registered.get_model("over-http") is not None


def test_a_subscriber_that_skips_is_a_skip(home: Path, functions_host: str) -> None:
    key = make_key(home.parent, "broker")  # the broker would sign; the host signs nothing
    remote = _broker(
        home, f"sign={functions_host}/functions/sign", **{"signing.key": str(key.private)}
    )
    outcomes = remote.broker().publish(_pushed(home, "unsigned"))
    sign = [o for o in outcomes if o.function == "sign"]
    assert [(o.status, o.replies) for o in sign] == [(204, ())]
    assert "signing is off" in sign[0].skipped  # the host's reason, carried over


class _Answer:
    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.headers, self.body = status, {"Content-Type": "application/json"}, body


@pytest.mark.parametrize(
    ("answered", "status", "says"),
    [
        (400, 400, "the field x is wrong"),
        (409, 409, "other content"),
        (422, 422, "signature"),
        (429, 429, "slow down"),
        (500, 503, "boom"),
        (503, 503, "registry down"),
        (401, 503, "token refused"),  # the broker's own credentials: retried, not the sender's
    ],
)
def test_what_a_subscriber_answers_keeps_its_meaning(
    home: Path, answered: int, status: int, says: str
) -> None:
    body = json.dumps({"error": "x", "message": says}).encode()
    for url in _server(lambda *_: _Answer(answered, body)):
        remote = _broker(home, f"register={url}/")
        outcome = remote.broker().publish(_pushed(home, f"answered-{answered}"))[0]
    assert (outcome.function, outcome.status) == ("register", status)
    assert says in outcome.error["message"] and "register at http://" in outcome.error["message"]


def test_a_subscriber_that_does_not_answer_is_transient(home: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    outcome = _broker(home, f"register={url}/").broker().publish(_pushed(home, "gone"))[0]
    assert outcome.status == 503
    assert "did not answer" in outcome.error["message"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("register", "'register' is not 'function=http(s)://host[:port]'"),
        ("register=ftp://x", "is not 'function=http(s)://host[:port]'"),
        ("regster=http://x", "no function 'regster'"),
    ],
)
def test_a_wrong_subscribers_setting_names_the_entry(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match="MODELHOOKS_ROUTER_SUBSCRIBERS") as raised:
        subscribers(spec, ("register", "sign"))
    assert says in str(raised.value)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
))  # fmt: skip
def test_the_reason_of_any_answer_is_text_and_never_raises(doc: object) -> None:
    """What a subscriber (or a server `replay` posts to) answers may be any JSON at all."""
    reason = answer_reason(json.dumps(doc).encode())
    assert isinstance(reason, str)


def test_the_reason_names_each_failed_function() -> None:
    body = {
        "outcomes": [
            {"function": "register", "status": 200},
            {"function": "sign", "status": 503, "error": {"message": "store down"}},
        ]
    }
    assert answer_reason(json.dumps(body)) == "sign (503): store down"
    assert answer_reason(b"not json") == "not json"
