"""The model-signing manifest and its in-toto Statement, byte-compatible in meaning with
`model_signing` 1.x (sigstore/model-transparency).

A manifest pairs every file (or file shard) of a model with its digest. The Statement's
subject is one entry named after the model whose sha256 is computed over the raw resource
digests concatenated in canonical order (path components, then shard start), so the
same files give the same root digest whoever hashed them.

>>> m = Manifest("m", Serialization(), (Resource("a", "sha256", "00" * 32),))
>>> Manifest.from_statement(m.statement()) == m
True
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from modelhooks.core.errors import VerificationFailed

__all__ = [
    "DEFAULT_IGNORED",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "HashType",
    "Manifest",
    "Method",
    "Resource",
    "Serialization",
    "indented_json",
    "is_ignored",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# model_signing ignores these by default when hashing a directory; so do we, so the
# same files give the same manifest.
DEFAULT_IGNORED = (".git", ".gitattributes", ".github", ".gitignore")

Method = Literal["files", "shards"]
HashType = Literal["sha256", "blake3"]


def is_ignored(name: str, ignored: Iterable[str]) -> bool:
    """True when `name` (model-relative, POSIX) is an ignored path or lies under one."""
    return any(name == p or name.startswith(p.rstrip("/") + "/") for p in ignored)


def _order(resource: Resource) -> tuple[tuple[str, ...], int]:
    # model_signing sorts PurePosixPath keys, i.e. by path components ("a/b" < "a.txt"),
    # and shards by their integer start offset.
    start = int(resource.name.rsplit(":", 2)[1]) if resource.sharded else 0
    return tuple(resource.path.split("/")), start


def _by_path(resources: Iterable[Resource]) -> dict[str, set[tuple[str, str, str]]]:
    grouped: dict[str, set[tuple[str, str, str]]] = {}
    for r in resources:
        grouped.setdefault(r.path, set()).add((r.name, r.algorithm, r.digest))
    return grouped


class Serialization(msgspec.Struct, frozen=True):
    """How a manifest was computed: recorded in the predicate so verifiers can redo it."""

    method: Method = "files"
    hash_type: HashType = "sha256"
    shard_size: int | None = None
    allow_symlinks: bool = False
    ignore_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method == "shards" and not self.shard_size:
            raise ValueError("shard serialization needs a shard_size")
        if self.method == "shards" and self.hash_type == "blake3":
            raise ValueError("model_signing never shards blake3: use files")

    @property
    def algorithm(self) -> str:
        """The `algorithm` of each resource descriptor."""
        if self.method == "shards":
            return f"{self.hash_type}-sharded-{self.shard_size}"
        return self.hash_type

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "method": self.method,
            "hash_type": self.hash_type,
            "allow_symlinks": self.allow_symlinks,
        }
        if self.method == "shards":
            body["shard_size"] = self.shard_size
        if self.ignore_paths:
            body["ignore_paths"] = sorted(self.ignore_paths)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Serialization:
        method = body.get("method")
        hash_type = body.get("hash_type")
        if method not in ("files", "shards") or hash_type not in ("sha256", "blake3"):
            raise VerificationFailed(
                "unsupported serialization in signature", method=method, hash_type=hash_type
            )
        size = body.get("shard_size")
        # model_signing writes the predicate through a protobuf Struct: ints come back
        # as floats (1000000000.0).
        return cls(
            method=method,
            hash_type=hash_type,
            shard_size=int(size) if size is not None else None,
            allow_symlinks=bool(body.get("allow_symlinks", False)),
            ignore_paths=tuple(str(p) for p in body.get("ignore_paths", ())),
        )


class Resource(msgspec.Struct, frozen=True, order=True):
    """One file (`name`) or shard (`name:start:end`) and its hex digest."""

    name: str
    algorithm: str
    digest: str

    @property
    def sharded(self) -> bool:
        return "-sharded-" in self.algorithm

    @property
    def path(self) -> str:
        """The model-relative file path (without the `:start:end` of a shard)."""
        return self.name.rsplit(":", 2)[0] if self.sharded else self.name


class Manifest(msgspec.Struct, frozen=True):
    """A model's files and their digests, in canonical order."""

    model_name: str
    serialization: Serialization
    resources: tuple[Resource, ...] = ()

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "resources", tuple(sorted(self.resources, key=_order)))

    @property
    def root_digest(self) -> str:
        """sha256 over the raw resource digests in canonical order (the subject digest)."""
        h = hashlib.sha256()
        for r in self.resources:
            h.update(bytes.fromhex(r.digest))
        return h.hexdigest()

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(r.path for r in self.resources)

    def statement(self) -> bytes:
        """The in-toto Statement v1 (JSON) that gets signed."""
        body = {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": self.model_name, "digest": {"sha256": self.root_digest}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "serialization": self.serialization.to_json(),
                "resources": [
                    {"name": r.name, "algorithm": r.algorithm, "digest": r.digest}
                    for r in self.resources
                ],
            },
        }
        return indented_json(body)

    @classmethod
    def from_statement(cls, payload: bytes) -> Manifest:
        """Parse a signed Statement; VerificationFailed unless it is a consistent v1.0
        model-signing statement (the subject digest must match the resources)."""
        try:
            body = json.loads(payload)
            if body.get("_type") != STATEMENT_TYPE:
                raise VerificationFailed("not an in-toto Statement v1", type=body.get("_type"))
            if body.get("predicateType") != PREDICATE_TYPE:
                raise VerificationFailed(
                    "not a model-signing v1.0 statement", predicateType=body.get("predicateType")
                )
            (subject,) = body["subject"]
            predicate = body["predicate"]
            manifest = cls(
                model_name=str(subject.get("name", "")),
                serialization=Serialization.from_json(predicate["serialization"]),
                resources=tuple(
                    Resource(str(r["name"]), str(r["algorithm"]), str(r["digest"]).lower())
                    for r in predicate["resources"]
                ),
            )
            claimed = str(subject["digest"]["sha256"]).lower()
        except VerificationFailed:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise VerificationFailed("malformed model-signing statement", reason=str(e)) from e
        if manifest.root_digest != claimed:
            raise VerificationFailed(
                "statement is inconsistent: resources do not hash to the subject digest",
                subject=claimed,
                computed=manifest.root_digest,
            )
        return manifest

    def diff(self, actual: Manifest) -> dict[str, list[str]]:
        """What differs between this (signed) manifest and `actual` (hashed now), by file:
        {"missing": [...], "extra": [...], "modified": [...]}; empty lists when equal."""
        expected, found = _by_path(self.resources), _by_path(actual.resources)
        exp_paths, act_paths = expected.keys(), found.keys()
        # A file whose shards differ (other size) is modified, not missing plus extra.
        modified = {p for p in exp_paths & act_paths if expected[p] != found[p]}
        return {
            "missing": sorted(exp_paths - act_paths),
            "extra": sorted(act_paths - exp_paths),
            "modified": sorted(modified),
        }


# what json.dumps(ensure_ascii=True) writes as is: printable ASCII, and the indent's newlines
_PLAIN = re.compile(rb"[\x20-\x5b\x5d-\x7e\n]*")


def indented_json(body: Mapping[str, Any]) -> bytes:
    """`json.dumps(body, indent=2).encode()`, byte for byte (what is signed must not change),
    for a body of strings, integers, booleans, None, lists and dicts: made by msgspec (~2 us,
    where the stdlib's indenting encoder is pure Python: ~35 us a statement, two of them
    per signed model), unless a string needs an escape (a backslash, a control or non-ASCII
    character, which the two encoders write differently): then by the stdlib."""
    try:
        fast: bytes | None = msgspec.json.format(msgspec.json.encode(body), indent=2)
    except TypeError:  # a type msgspec refuses (a str subclass)
        fast = None
    if fast is not None and _PLAIN.fullmatch(fast):
        return fast
    return json.dumps(body, indent=2).encode()
