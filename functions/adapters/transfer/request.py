"""A `transfer.requested` event run as `modelhooks transfer` runs: the `transfer` function's
side. The event's fields stand for the settings they name, as `--args` would (the highest
precedence), over the process's own configuration: the same MODEL_SYNC_* environment and
credential files the CLI reads (credentials, signing key, storage path), one config path.

What an event may not decide: the registry (the function's configured one, through the
ModelRegistry port), the hosts it may reach (only public addresses unless the function's
`store.allow_local_targets` / `store.allowed_hosts`), TLS verification (always on), the S3
endpoint and every credential (configuration only). The copy is bounded by `timeout`: past
it the transfer stops, the artifact is ABANDONED with the reason, and a redelivery resumes.

>>> Transfers(env=os.environ, timeout=600).run(request, registry=registry)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import msgspec

from modelhooks.core.errors import BadRequest, ConfigError, Unavailable
from modelhooks.core.function import Skip
from modelhooks.core.ports import ModelRegistry
from modelhooks.events.model import TransferRequested

if TYPE_CHECKING:  # imported by the first transfer (the function's process starts without)
    from modelhooks.adapters.transfer.config import Metadata, TransferConfig

__all__ = ["Done", "Transfers", "arguments", "metadata"]


@dataclass(frozen=True)
class Done:
    """What one transfer did: its result (ids, uri, digest, …) and whether anything new was
    registered (False: a redelivery found the same copy LIVE)."""

    result: Mapping[str, Any]
    created: bool


@dataclass(frozen=True)
class Transfers:
    env: Mapping[str, str] = field(default_factory=dict)
    allow_local: bool = False
    allowed_hosts: frozenset[str] = frozenset()
    timeout: float = 900.0
    # the source and destination of a configuration (default: those it names); tests pass
    # local directories here, as `build(settings, registry=…)` takes a fake registry
    ends: Callable[[TransferConfig], tuple[Any, Any]] | None = None

    def config(self, request: TransferRequested, *, model_id: str = "") -> TransferConfig:
        """The configuration of `request`; a setting the process lacks (a credential, a
        signer asked for) is a deployment gap: Unavailable (503, redelivered once fixed)."""
        from modelhooks.adapters.transfer.config import resolve

        try:
            cfg = resolve(
                arguments(request, model_id=model_id), self.env, metadata=metadata(request)
            )
        except ConfigError as exc:
            raise Unavailable(
                f"transfer is not configured for this request: {exc.message}"
            ) from None
        return replace(cfg, allow_local=self.allow_local, allowed_hosts=self.allowed_hosts)

    def run(
        self,
        request: TransferRequested,
        *,
        registry: ModelRegistry,
        model_id: str = "",
        event: str = "",
        at: str = "",
        owner: str | None = None,
    ) -> Done:
        """`event` names the delivery (its source and id), `at` its time: one that took
        effect already is answered from the registry as the first time, and one older than
        the request that made the artifact LIVE is moot (Skip); nothing is copied for
        either (its source may be gone by now; copied, it would take the artifact back).
        `owner`: the request's tenant (tenancy on): only its models are registered into."""
        from modelhooks.adapters.transfer.run import build_signer, transfer

        cfg = self.config(request, model_id=model_id)
        if owner is not None:  # before a delivery is answered from another tenant's model
            from modelhooks.adapters.transfer.register import check

            check(registry, cfg, owner=owner)
        if event and (done := self._answered(registry, cfg, event, at)) is not None:
            return done
        try:
            signer = build_signer(cfg) if cfg.sign else None
        except ConfigError as exc:
            raise Unavailable(f"transfer cannot sign: {exc.message}") from None
        before: list[str] = []
        try:
            result = transfer(
                cfg,
                Deadline(self.timeout),
                registry=registry,
                signer=signer,
                after_begin=lambda target: before.append(target.artifact.digest),
                ends=self.ends(cfg) if self.ends else None,
                event=event,
                at=at,
                owner=owner,
            )
        except ConfigError as exc:  # what the request names holds nothing to copy
            raise BadRequest(exc.message, field="source") from None
        return Done(result, created=before[:1] != [result["digest"]])

    @staticmethod
    def _answered(registry: ModelRegistry, cfg: TransferConfig, event: str, at: str) -> Done | None:
        """The answer the registry already holds for this delivery, if any (see run)."""
        from modelhooks.adapters.transfer.register import (
            TRANSFER_AT,
            TRANSFER_CREATED,
            TRANSFER_EVENT,
            live_artifact,
        )

        target = live_artifact(registry, cfg)
        if target is None:
            return None
        props = target.artifact.custom_properties
        if props.get(TRANSFER_EVENT) == event:
            uri, digest = target.artifact.uri, target.artifact.digest
            created = props.get(TRANSFER_CREATED) == "true"
            return Done({**target.ids(), "uri": uri, "digest": digest}, created=created)
        if at and props.get(TRANSFER_AT, "") > at:
            raise Skip(
                f"a newer request ({props.get(TRANSFER_EVENT)}) made the artifact LIVE since "
                "this one was sent: it is moot, nothing is copied"
            )
        return None


class Deadline:
    """A transfer's progress that stops it once `seconds` have passed (checked as bytes
    move: each chunk; a stalled connection is bounded by the clients' own timeouts)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.stop, self.done = seconds, time.monotonic() + seconds, 0

    def start(self, total: int | None) -> None:
        pass

    def advance(self, n: int) -> None:
        self.done += n
        if time.monotonic() > self.stop:
            raise Unavailable(
                f"transfer.timeout: {self.seconds:g} s passed after {self.done} bytes; "
                "a redelivery resumes the copy"
            )


def arguments(request: TransferRequested, *, model_id: str = "") -> dict[str, str]:
    """The request's fields as the settings (`--args`) they stand for."""
    src, dst = request.source, request.destination
    args = {
        "source_type": src.type,
        "destination_type": dst.type,
        "model_upload_intent": request.intent,
        "destination_oci_enable_tls_verify": "true",  # an event names the host: verify it
    }
    for side, part in (("source", src), ("destination", dst)):
        if part.type == "s3":
            args |= {f"{side}_aws_bucket": part.bucket or "", f"{side}_aws_key": part.key or ""}
            if part.region:
                args[f"{side}_aws_region"] = part.region
        elif part.type == "gcs":
            args |= {f"{side}_gcs_bucket": part.bucket or "", f"{side}_gcs_key": part.key or ""}
        elif part.type == "oci":
            args[f"{side}_oci_uri"] = part.uri or ""
    if src.type == "uri":
        args["source_uri"] = src.uri or ""
        if src.sha256:
            args["source_uri_sha256"] = src.sha256
    if dst.format:
        args["destination_oci_format"] = dst.format
    if dst.base_image:
        args["destination_oci_base_image"] = dst.base_image
    optional = {
        "model_id": model_id or request.model.id,
        "model_version_id": request.version.id,
        "model_artifact_id": request.artifact.id,
        "model_name": request.model.name,
        "model_version_name": request.version.name,
        "sign": None if request.sign is None else str(request.sign).lower(),
    }
    args |= {k: v for k, v in optional.items() if v}
    return args


def metadata(request: TransferRequested) -> Metadata:
    """The request's metadata as the metadata directory's (kind → field → value)."""
    from modelhooks.adapters.transfer.config import Metadata

    kinds = {
        "RegisteredModel": msgspec.to_builtins(request.model),
        "ModelVersion": msgspec.to_builtins(request.version),
        "ModelArtifact": msgspec.to_builtins(request.artifact),
    }
    return Metadata(
        {
            kind: {k: v for k, v in values.items() if v not in (None, {}) and k != "id"}
            for kind, values in kinds.items()
        }
    )
