"""Sigstore bundle v0.3 (JSON) holding a DSSE envelope: reading it without trusting it,
and assembling one for the key and certificate methods (which sigstore-python refuses to
build, as model_signing notes: they carry no transparency-log entry).

A bundle is written here as sigstore_models writes it (its JSON to the byte), without its
pydantic models: importing them cost sign's first event ~100 ms of CPU (issue 22).
`sigstore_models` is imported lazily, by verification only (`proto_bundle`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from modelhooks.adapters.signing.manifest import PAYLOAD_TYPE
from modelhooks.core.errors import VerificationFailed

if TYPE_CHECKING:
    from sigstore_models.bundle.v1 import Bundle

__all__ = [
    "MEDIA_TYPE",
    "certificate_material",
    "dsse_bundle",
    "envelope_parts",
    "fulcio_issuer",
    "pae",
    "proto_bundle",
    "public_key_material",
    "signer_of",
    "unverified_payload",
]

MEDIA_TYPE: Final[Literal["application/vnd.dev.sigstore.bundle.v0.3+json"]] = (
    "application/vnd.dev.sigstore.bundle.v0.3+json"
)


def _load(bundle: bytes) -> dict[str, Any]:
    try:
        body = json.loads(bundle)
    except ValueError as e:
        raise VerificationFailed("signature is not JSON", reason=str(e)) from e
    if not isinstance(body, dict) or "dsseEnvelope" not in body:
        raise VerificationFailed("signature is not a Sigstore bundle with a DSSE envelope")
    return body


def pae(payload: bytes, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature is computed over."""
    head = f"DSSEv1 {len(payload_type)} {payload_type} {len(payload)} "
    return head.encode() + payload


def unverified_payload(bundle: bytes) -> tuple[str, bytes]:
    """(payloadType, payload) of the envelope, WITHOUT checking any signature."""
    envelope = _load(bundle)["dsseEnvelope"]
    try:
        return str(envelope["payloadType"]), base64.b64decode(envelope["payload"])
    except (KeyError, ValueError) as e:
        raise VerificationFailed("malformed DSSE envelope", reason=str(e)) from e


def envelope_parts(bundle: bytes) -> tuple[str, bytes, bytes]:
    """(payloadType, payload, first signature) of the envelope, unverified."""
    envelope = _load(bundle)["dsseEnvelope"]
    try:
        signature = base64.b64decode(envelope["signatures"][0]["sig"])
    except (KeyError, IndexError, ValueError) as e:
        raise VerificationFailed("DSSE envelope has no signature", reason=str(e)) from e
    return (*unverified_payload(bundle), signature)


def signer_of(bundle: bytes) -> str:
    """Who the bundle claims signed it (unverified): key hint or certificate subject/SAN."""
    material = _load(bundle).get("verificationMaterial", {})
    if "publicKey" in material:
        return f"key sha256:{material['publicKey'].get('hint') or '?'}"
    from cryptography import x509  # for a certificate only: a key's bundle needs none of it

    certs = material.get("x509CertificateChain", {}).get("certificates") or [
        material.get("certificate", {})
    ]
    try:
        leaf = x509.load_der_x509_certificate(base64.b64decode(certs[0]["rawBytes"]))
    except (KeyError, ValueError):
        return "unknown"
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san]
    except x509.ExtensionNotFound:
        names = []
    issuer = fulcio_issuer(leaf)
    if issuer is not None:  # Fulcio's: the identity and the OIDC issuer that vouched for it
        return f"sigstore {', '.join(names) or '?'} ({issuer})"
    subject = leaf.subject.rfc4514_string()
    return f"certificate {subject or '(empty subject)'}" + (
        f" ({', '.join(names)})" if names else ""
    )


def fulcio_issuer(leaf: Any) -> str | None:
    """The OIDC issuer Fulcio recorded in the certificate (its v2 extension, a DER
    UTF8String, else the deprecated raw one); None for a certificate Fulcio did not make."""
    from cryptography import x509

    for oid, der in (("1.3.6.1.4.1.57264.1.8", True), ("1.3.6.1.4.1.57264.1.1", False)):
        try:
            value = leaf.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value.value
        except x509.ExtensionNotFound:
            continue
        raw = bytes(value)
        if der and raw[:1] == b"\x0c" and len(raw) > 1:  # UTF8String: tag, length, text
            raw = raw[2:] if raw[1] < 0x80 else raw[2 + (raw[1] & 0x7F) :]
        return raw.decode("utf-8", "replace")
    return None


def proto_bundle(bundle: bytes) -> Bundle:
    """The bundle as model_signing's protobuf-style model (key and certificate methods)."""
    from sigstore_models.bundle.v1 import Bundle

    body = _load(bundle)
    material = body.get("verificationMaterial")
    if not isinstance(material, dict):
        raise VerificationFailed("bundle has no verificationMaterial")
    # Older producers omit tlogEntries or put raw key material next to the hint.
    material.setdefault("tlogEntries", [])
    if isinstance(material.get("publicKey"), dict):
        key = material["publicKey"]
        material["publicKey"] = {"hint": key.get("hint")}
    try:
        return Bundle.from_dict(body)
    except ValueError as e:
        raise VerificationFailed("malformed Sigstore bundle", reason=str(e)) from e


def dsse_bundle(statement: bytes, signature: bytes, material: Mapping[str, Any]) -> bytes:
    """A bundle v0.3 with a DSSE envelope over `statement`, as model_signing writes it:
    sigstore_models' JSON (compact, camelCase, its fields in their order, bytes in base64).
    `material`: the bundle's verificationMaterial as JSON (`public_key_material`,
    `certificate_material`)."""
    envelope = {
        "payload": _b64(statement),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"sig": _b64(signature), "keyid": ""}],
    }
    doc = {"mediaType": MEDIA_TYPE, "verificationMaterial": material, "dsseEnvelope": envelope}
    return json.dumps(doc, separators=(",", ":")).encode()


def public_key_material(hint: str) -> dict[str, Any]:
    """The verificationMaterial of a key's bundle: the key's hint, no log entries."""
    return {"publicKey": {"hint": hint}, "tlogEntries": []}


def certificate_material(certificates: list[bytes]) -> dict[str, Any]:
    """The verificationMaterial of a certificate's bundle: its chain (DER, leaf first)."""
    chain = [{"rawBytes": _b64(der)} for der in certificates]
    return {"x509CertificateChain": {"certificates": chain}, "tlogEntries": []}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
