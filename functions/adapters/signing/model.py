"""Sign and verify a model where it lies (local directory, GCS, S3), streamed.

The signature is a model-signing bundle written next to the model (`<prefix>/model.sig` by
default) with a conditional write, so two deliveries never race to different signatures.

>>> signed = sign_model(store, "models", "bert/1", KeySigner.from_file(key))  # doctest: +SKIP
>>> verify_model(store, "models", "bert/1", KeyVerifier(pub)).root_digest  # doctest: +SKIP
'9d3c…'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from modelhooks.adapters.signing.binding import Binding, binding_key
from modelhooks.adapters.signing.bundle import signer_of, unverified_payload
from modelhooks.adapters.signing.manifest import DEFAULT_IGNORED, Manifest
from modelhooks.adapters.signing.streaming import (
    HashOptions,
    Progress,
    hash_model,
    list_model,
    read_object,
)
from modelhooks.core.errors import (
    BadRequest,
    Conflict,
    NotFound,
    SignatureExists,
    Unavailable,
    VerificationFailed,
)
from modelhooks.core.extras import require

if TYPE_CHECKING:
    from modelhooks.core.ports import ObjectStore, Signer, Verifier
    from modelhooks.core.records import ObjectInfo

__all__ = [
    "Location",
    "Signed",
    "Verified",
    "sign_model",
    "signature_key",
    "still_bound",
    "verify_bundle",
    "verify_model",
]


class Location(msgspec.Struct, frozen=True):
    """A signature kept outside the model (another bucket, a local file, …)."""

    store: ObjectStore
    bucket: str
    key: str


class Signed(msgspec.Struct, frozen=True):
    """A model's signature: where it is, what it covers, whether this call wrote it (and
    its binding statement next to it)."""

    bucket: str
    key: str
    root_digest: str
    signer: str
    created: bool
    manifest: Manifest
    bound: bool = False

    def __repr__(self) -> str:  # without the manifest: every file of the model
        return (
            f"Signed(bucket={self.bucket!r}, key={self.key!r}, root_digest={self.root_digest!r}, "
            f"signer={self.signer!r}, created={self.created!r})"
        )


class Verified(msgspec.Struct, frozen=True):
    root_digest: str
    signer: str
    manifest: Manifest

    def __repr__(self) -> str:  # without the manifest
        return f"Verified(root_digest={self.root_digest!r}, signer={self.signer!r})"


def signature_key(prefix: str, name: str = "model.sig") -> str:
    """Where a model's signature lives: `name` inside the model prefix."""
    prefix = prefix.strip("/")
    return f"{prefix}/{name}" if prefix else name


def _existing(at: Location, listed: bool | None = None) -> bytes | None:
    """The object at `at`, None if there is none. `listed`: whether a listing made just now
    found it (then it is read, or not, without asking first)."""
    try:
        if listed is False or (listed is None and not at.store.stat(at.bucket, at.key)):
            return None
        return read_object(at.store, at.bucket, at.key)
    except NotFound:
        return None


def _claimed_digest(bundle: bytes) -> str | None:
    try:
        return Manifest.from_statement(unverified_payload(bundle)[1]).root_digest
    except VerificationFailed:
        return None


def sign_model(
    store: ObjectStore,
    bucket: str,
    prefix: str,
    signer: Signer,
    *,
    options: HashOptions | None = None,
    at: Location | None = None,
    replace: bool = False,
    progress: Progress | None = None,
    check: Callable[[list[ObjectInfo]], None] | None = None,
) -> Signed:
    """Hash the model, sign its manifest and store the bundle, only if absent, at
    `<prefix>/<options.signature_name>` (or `at`).

    Idempotent: when this signer's signature for the same root digest is already there,
    nothing is signed again (`created=False`). Any other signature (other content, other
    signer, forged) is SignatureExists (a Conflict), unless `replace`. `check` is given
    every object the listing after hashing found (the same as before it) before anything
    is written: it raises to sign nothing (the `sign` function: not the content the push
    names).
    """
    require("signing", "signing models")  # before hashing: the bundle needs its libraries
    opts = options or HashOptions()
    out = at or Location(store, bucket, signature_key(prefix, opts.signature_name))
    serialization = opts.serialization()
    ignored = (*serialization.ignore_paths, *DEFAULT_IGNORED)
    listed = list_model(store, bucket, prefix, ignored)
    before = _identities(listed)
    manifest = hash_model(
        store, bucket, prefix, serialization, options=opts, progress=progress, files=listed
    )
    seen: set[str] = set()  # every key under the prefix: a signature there, its binding
    every: list[ObjectInfo] = []
    files = list_model(store, bucket, prefix, ignored, seen=seen, every=every)
    if _identities(files) != before:  # a binding must name what was hashed
        raise Unavailable(
            f"the model under {bucket}/{prefix} changed while it was hashed; retry",
            bucket=bucket,
            prefix=prefix,
        )
    if check is not None:
        check(every)
    if not manifest.resources:  # a signature over nothing would "verify" forever
        raise BadRequest(
            f"no model files under {bucket}/{prefix}: nothing to sign", bucket=bucket, prefix=prefix
        )

    def settled(bundle: bytes) -> Signed | None:
        claimed = _claimed_digest(bundle)
        if claimed == manifest.root_digest and signer.signed(bundle):
            return Signed(out.bucket, out.key, claimed, signer_of(bundle), False, manifest)
        if replace:
            return None
        raise SignatureExists(
            "another signature already exists (other content or other signer); "
            "`modelhooks sign --replace` overwrites it",
            bucket=out.bucket,
            key=out.key,
            signed_digest=claimed,
            model_digest=manifest.root_digest,
        )

    def bound(signed: Signed, *, raced: bool = False) -> Signed:
        if at is None:  # next to a signature in the model's prefix: its binding statement
            listed = None if raced else binding_key(out.key) in seen  # raced: ask the store
            wrote = _bind(store, bucket, prefix, signer, manifest, files, out.key, listed)
            return msgspec.structs.replace(signed, bound=wrote)
        return signed

    # in the model's prefix, the listing said whether a signature is there (a request less;
    # one written since is found by the conditional write below)
    if (old := _existing(out, out.key in seen if at is None else None)) is not None and (
        done := settled(old)
    ):
        return bound(done)
    bundle = signer.sign(manifest.statement())
    try:
        out.store.put(out.bucket, out.key, bundle, if_absent=not replace)
    except Conflict:
        # A concurrent delivery won the race: fine if it signed the same content.
        other = _existing(out)
        if other is None or (done := settled(other)) is None:
            raise
        return bound(done, raced=True)
    created = Signed(out.bucket, out.key, manifest.root_digest, signer.identity(), True, manifest)
    return bound(created)


def still_bound(
    store: ObjectStore, bucket: str, prefix: str, *, options: HashOptions | None = None
) -> bool:
    """Whether the signature next to the model and its binding are there and the binding
    names the model's objects as one listing shows them now (no hashing): a model whose
    objects were written again, the same bytes (the same content digest: a retried upload),
    has new generations its binding does not name, and admission refuses it as rewritten
    until it is bound anew. An unreadable binding is not one."""
    opts = options or HashOptions()
    key = signature_key(prefix, opts.signature_name)
    ignored = (*opts.serialization().ignore_paths, *DEFAULT_IGNORED)
    seen: set[str] = set()
    files = list_model(store, bucket, prefix, ignored, seen=seen)
    if key not in seen or binding_key(key) not in seen:
        return False
    bundle = _existing(Location(store, bucket, binding_key(key)), listed=True)
    try:
        bound = Binding.from_statement(unverified_payload(bundle)[1]) if bundle else None
    except VerificationFailed:
        return False
    return bound is not None and dict(bound.objects) == _identities(files)


def _identities(files: list[tuple[str, ObjectInfo]]) -> dict[str, tuple[int, str]]:
    return {name: (info.size, info.generation) for name, info in files}


def _bind(
    store: ObjectStore,
    bucket: str,
    prefix: str,
    signer: Signer,
    manifest: Manifest,
    files: list[tuple[str, ObjectInfo]],
    signature: str,
    listed: bool | None,
) -> bool:
    """Write the binding statement next to the signature (modelhooks.adapters.signing.binding)
    unless one binding these very objects is there; only when the signature's ignore_paths
    name it (older signatures did not: `model_signing verify` would see an extra file).
    `listed`: whether a listing made just now found one (None: ask the store). Whether
    this call wrote it."""
    key = binding_key(signature)
    if key.rsplit("/", 1)[-1] not in manifest.serialization.ignore_paths:
        return False
    binding = Binding.of(manifest, files)
    if (old := _existing(Location(store, bucket, key), listed)) is not None:
        try:
            if Binding.from_statement(unverified_payload(old)[1]) == binding and signer.signed(old):
                return False  # a redelivery: the same objects already bound
        except VerificationFailed:
            pass  # unreadable: replaced below
    name = manifest.model_name or bucket
    store.put(bucket, key, signer.sign(binding.statement(name)), if_absent=False)
    return True


def verify_bundle(
    bundle: bytes, verifier: Verifier, *, expected_digest: str | None = None
) -> Manifest:
    """Check the bundle's signature and trust, and return the manifest it signs, without
    hashing the model. With `expected_digest`, a signature over another root digest is
    rejected (a signature copied from another model, or a stale one)."""
    manifest = Manifest.from_statement(verifier.verify(bundle))
    if expected_digest and manifest.root_digest != expected_digest.removeprefix("sha256:"):
        raise VerificationFailed(
            "the signature is for another model digest",
            signed_digest=manifest.root_digest,
            expected_digest=expected_digest,
        )
    return manifest


def _shown(at: Location) -> str:
    """Where a signature is, as a person names it: a local path, else bucket/key."""
    path = getattr(at.store, "path", None)
    return str(path(at.bucket, at.key)) if callable(path) else f"{at.bucket}/{at.key}"


def verify_model(
    store: ObjectStore,
    bucket: str,
    prefix: str,
    verifier: Verifier,
    *,
    options: HashOptions | None = None,
    at: Location | None = None,
    bundle: bytes | None = None,
    expected_digest: str | None = None,
    progress: Progress | None = None,
) -> Verified:
    """Verify the signature (`bundle`, or read from `at`, by default
    `<prefix>/<options.signature_name>`), then re-hash the model as
    the signature says it was hashed and compare file by file.

    VerificationFailed names what is wrong: untrusted signer, other digest, or the
    missing / extra / modified files.
    """
    opts = options or HashOptions()
    src = at or Location(store, bucket, signature_key(prefix, opts.signature_name))
    if bundle is None:
        bundle = _existing(src)
        if bundle is None:
            where = _shown(src)
            raise VerificationFailed(
                f"no signature at {where}: sign the model first, or point --signature at "
                "where its signature is",
                signature=where,
            )
    expected = verify_bundle(bundle, verifier, expected_digest=expected_digest)

    ignore = [opts.signature_name, *opts.ignore_paths]
    if opts.ready_marker not in expected.paths:
        ignore.append(opts.ready_marker)  # it may land after signing
    actual = hash_model(
        store,
        bucket,
        prefix,
        expected.serialization,
        options=opts,
        ignore=tuple(ignore),
        progress=progress,
    )
    diff = expected.diff(actual)
    if any(diff.values()):
        problems = {k: v for k, v in diff.items() if v}
        names = ", ".join(sorted({n for v in problems.values() for n in v}))
        raise VerificationFailed(f"the model does not match its signature: {names}", **problems)
    return Verified(expected.root_digest, signer_of(bundle), expected)
