"""What is signed keeps its bytes: the statements' indented JSON is json.dumps(indent=2)'s,
byte for byte, whichever encoder made it (modelhooks.adapters.signing.manifest.indented_json)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from modelhooks.adapters.signing.binding import Binding
from modelhooks.adapters.signing.manifest import Manifest, Resource, Serialization, indented_json

_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text()
_BODIES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), _BODIES, max_size=6))
def test_indented_json_is_the_stdlib_indent_byte_for_byte(body: dict[str, Any]) -> None:
    assert indented_json(body) == json.dumps(body, indent=2).encode()


class Name(str):
    """A str subclass (msgspec refuses to encode one)."""


def test_what_msgspec_refuses_or_writes_otherwise_goes_through_the_stdlib() -> None:
    for body in (
        {"name": Name("m")},
        {"name": "bert\u00e9", "path": "a\\b", "tab": "\t", "del": "\x7f", "nul": "\x00"},
        {"emoji": "\U0001f600", "sep": "\u2028"},
    ):
        assert indented_json(body) == json.dumps(body, indent=2).encode()


@settings(max_examples=100, deadline=None)
@given(
    st.text(min_size=1),
    st.lists(st.text(min_size=1), min_size=1, max_size=5, unique=True),
    st.sampled_from(["sha256", "blake3"]),
)
def test_statements_are_written_as_before(model: str, names: list[str], hash_type: str) -> None:
    """The manifest's Statement and the binding's, as they were written with json.dumps."""
    serialization = Serialization(hash_type=hash_type, ignore_paths=("model.sig",))  # type: ignore[arg-type]
    resources = tuple(Resource(n, "sha256", f"{i:064x}") for i, n in enumerate(sorted(names)))
    manifest = Manifest(model, serialization, resources)
    body = json.loads(manifest.statement())
    assert manifest.statement() == json.dumps(body, indent=2).encode()
    binding = Binding(manifest.root_digest, {n: (i, f"{i}-{i}") for i, n in enumerate(names)})
    statement = binding.statement(model)
    assert statement == json.dumps(json.loads(statement), indent=2).encode()
    assert Binding.from_statement(statement) == binding
