"""One transfer: copy (streaming), sign, register, as the configuration says.

    claim  → an S3 or GCS destination claimed for the source (stores.claim): another
             source's copy there is refused before anything is registered or copied
    begin  → the intent's model, version and artifact found or created, the artifact PENDING
    copy   → each source file streamed to the destination (sha256 on the way); files the
             destination already has from the same source revision are skipped
    sign   → (per the signing rule) the manifest of those digests signed, its bundle
             written next to the model as `model.sig` (model_signing's own layout)
    finish → the artifact LIVE with the destination URI and the model's digest;
             any failure: ABANDONED with the reason, and the error raised

>>> result = transfer(resolve(sys.argv[1:], os.environ), progress)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelhooks.adapters.transfer.config import TransferConfig
from modelhooks.adapters.transfer.files import FileEntry, HashingReader, Progress
from modelhooks.core.errors import ConfigError, ModelhooksError, Transient

if TYPE_CHECKING:
    from modelhooks.adapters.signing.manifest import Manifest

__all__ = [
    "Copied",
    "build_destination",
    "build_signer",
    "build_source",
    "copy",
    "sign_bundle",
    "source_key",
    "transfer",
    "write_termination_message",
]

_log = logging.getLogger("modelhooks.transfer")
SIGNATURE = "model.sig"


@dataclass
class Copied:
    uri: str = ""
    files: dict[str, tuple[int, str]] = field(default_factory=dict)  # path → (size, sha256)
    skipped: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # the files in the source's order
    signed_by: str = ""
    root_digest: str = ""  # of the signed manifest
    begun: bool = False  # the source showed a file to copy (something may be written)

    @property
    def digest(self) -> str:
        """sha256 over the sorted (path, sha256) pairs, model.sig excluded: the content's."""
        h = hashlib.sha256()
        for path, (_, sha) in sorted(self.files.items()):
            if path != SIGNATURE:
                h.update(f"{path}\0{sha}\n".encode())
        return "sha256:" + h.hexdigest()


def _oci_clients(cfg: TransferConfig, side: str) -> Any:
    from modelhooks.adapters.oci.clients import OciClients

    user, password = cfg.get(f"{side}_oci_username"), cfg.get(f"{side}_oci_password")
    if cfg.allow_local is None:  # the CLI's: the operator names the registries
        return OciClients((user, password) if user else None)
    # the function's: an event names the hosts (the reference's, the base image's); the
    # process's credentials go to the registry they are configured for
    # (MODEL_SYNC_<SIDE>_OCI_REGISTRY, or the .dockerconfigjson entry of that host) and to
    # no other, which is asked anonymously: they went to any host an event named. The token
    # realm that registry names gets them too, as the Job sends them (one registry is
    # configured, not its token server: Docker Hub's is auth.docker.io)
    registry = _registry_host(cfg.get(f"{side}_oci_registry"))
    return OciClients(
        (user, password) if user else None,
        allow_local=cfg.allow_local,
        allowed_hosts=cfg.allowed_hosts,
        credential_hosts=frozenset({registry} - {""}),
        registry_realms=True,
    )


def _registry_host(value: str) -> str:
    """`host[:port]` of a registry as configured (`https://reg.example/`, `reg.example`),
    lower case."""
    return value.split("://", 1)[-1].split("/", 1)[0].lower()


def build_source(cfg: TransferConfig) -> Any:
    kind, ep = cfg.source.kind, cfg.source
    if kind == "uri":
        from modelhooks.adapters.transfer.uri import UriSource

        return UriSource(
            cfg.get("source_uri"),
            allow_local=(
                cfg.flag("source_uri_allow_local") if cfg.allow_local is None else cfg.allow_local
            ),
            allowed_hosts=cfg.allowed_hosts,
            sha256=cfg.get("source_uri_sha256"),
        )
    return _store_end(cfg, "source", kind, ep)


def build_destination(cfg: TransferConfig) -> Any:
    return _store_end(cfg, "destination", cfg.destination.kind, cfg.destination)


def _journal(cfg: TransferConfig, side: str, where: str) -> Path | None:
    """The resume journal of a destination `where` (`kind:bucket/key`) in
    MODEL_SYNC_STORAGE_PATH; a source has none."""
    if side != "destination":
        return None
    kind = where.partition(":")[0]
    return cfg.storage_path / f"{kind}-{hashlib.sha256(where.encode()).hexdigest()[:16]}.json"


def _store_end(cfg: TransferConfig, side: str, kind: str, ep: Any) -> Any:
    from modelhooks.adapters.transfer import oci, stores

    if kind == "s3":
        from modelhooks.adapters.object_store.s3 import S3ObjectStore

        store = S3ObjectStore(
            endpoint_url=ep.get("aws_endpoint") or None,
            region=ep.get("aws_region") or None,
            credentials={
                "aws_access_key_id": ep.get("aws_access_key_id"),
                "aws_secret_access_key": ep.get("aws_secret_access_key"),
            },
        )
        bucket, key = ep.get("aws_bucket"), ep.get("aws_key")
        return stores.S3End(store, bucket, key, _journal(cfg, side, f"s3:{bucket}/{key}"))
    if kind == "gcs":
        from modelhooks.adapters.object_store.gcs import GcsObjectStore

        bucket, key = ep.get("gcs_bucket"), ep.get("gcs_key")
        journal = _journal(cfg, side, f"gcs:{bucket}/{key}")
        return stores.GcsEnd(GcsObjectStore(), bucket, key, journal)
    if kind == "local":
        return stores.LocalEnd(ep.get("path"))
    uri = ep.get("oci_uri")
    uri = uri if uri.startswith("oci://") else f"oci://{uri}"
    from modelhooks.adapters.oci.distribution import parse_uri

    clients = _oci_clients(cfg, side)
    client, repo, ref = clients.for_uri(uri)
    if side == "destination" and not cfg.flag("destination_oci_enable_tls_verify"):
        client = _unverified(client, parse_uri(uri)[0])
    if side == "source":
        return oci.OciEnd(client, repo, ref, host=parse_uri(uri)[0])
    base = None
    fmt = cfg.get("destination_oci_format")
    if fmt == "image" and cfg.get("destination_oci_base_image").lower() not in (
        "",
        "scratch",
        "none",
    ):
        base_ref = _docker_ref(cfg.get("destination_oci_base_image"))
        base = clients.for_uri(base_ref)
    key = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return oci.OciEnd(
        client,
        repo,
        ref,
        host=parse_uri(uri)[0],
        fmt=fmt,
        base=base,
        journal=cfg.storage_path / f"oci-{key}.json",
    )


def _unverified(client: Any, host: str) -> Any:
    """MODEL_SYNC_DESTINATION_OCI_ENABLE_TLS_VERIFY=false, as upstream's tools read it:
    HTTPS without verifying the certificate, or plain HTTP where the registry has no TLS."""
    import ssl
    import urllib.error
    import urllib.request

    from modelhooks.adapters.oci.distribution import DistributionRegistry

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    for scheme in ("https", "http"):
        try:
            opener.open(f"{scheme}://{host}/v2/", timeout=10).close()
        except urllib.error.HTTPError:
            pass  # an answer (401 asks for credentials): this scheme speaks
        except OSError:
            continue
        return DistributionRegistry(
            f"{scheme}://{host}", auth=client.auth.credentials, opener=opener
        )
    return client


def _docker_ref(ref: str) -> str:
    """`busybox:latest` → oci://registry-1.docker.io/library/busybox:latest (Docker's
    shorthand: no registry host in the first component)."""
    ref = ref.removeprefix("oci://")
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return f"oci://{ref}"
    path = ref if "/" in ref else f"library/{ref}"
    return f"oci://registry-1.docker.io/{path}"


def copy(source: Any, destination: Any, progress: Progress, into: Copied | None = None) -> Copied:
    """Every file of `source` to `destination`, streaming; what the destination already
    has from the same source revision (same size, a recorded sha256) is kept. `into`: the
    Copied to fill (its caller reads `begun` when the copy fails)."""
    copied = Copied() if into is None else into
    progress.start(None)
    for entry in source.files():
        if entry.path == SIGNATURE:  # a signature of the source is not ours to carry over
            continue
        copied.begun = True
        had = destination.existing(entry.path) if entry.fingerprint else None
        if had and had[0] == entry.size and had[1] and had[2] == entry.fingerprint:
            copied.files[entry.path] = (entry.size, had[1])
            copied.skipped.append(entry.path)
            progress.advance(entry.size)
        else:
            with HashingReader(entry.open) as reader:
                copied.files[entry.path] = (entry.size, destination.write(entry, reader, progress))
        copied.order.append(entry.path)
    if not copied.order:
        raise ConfigError(f"{getattr(source, 'uri', 'the source')}: no files to transfer")
    copied.uri = destination.uri
    return copied


def sign_bundle(copied: Copied, signer: Any, model_name: str) -> bytes:
    """model-signing's bundle over the copied files' digests (no second read)."""
    return signer.sign(_statement(copied, model_name))  # type: ignore[no-any-return]


def _statement(copied: Copied, model_name: str) -> bytes:
    return _manifest(copied, model_name).statement()


def _manifest(copied: Copied, model_name: str) -> Manifest:
    from modelhooks.adapters.signing.manifest import Manifest, Resource
    from modelhooks.adapters.signing.streaming import HashOptions

    resources = tuple(
        Resource(path, "sha256", sha)
        for path, (_, sha) in sorted(copied.files.items())
        if path != SIGNATURE
    )
    return Manifest(model_name, HashOptions().serialization(), resources)


def _sign(copied: Copied, destination: Any, signer: Any, model_name: str) -> None:
    """model.sig over the copy's digests, written next to the model; unless the destination
    already has one written over the same statement by the same signer (a re-run, a
    redelivery): signing again would change nothing the signature says, yet make another
    Rekor entry (keyless) and, on OCI, another manifest for the tag."""
    manifest, identity = _manifest(copied, model_name), signer.identity()
    statement = manifest.statement()
    mark = "signed:" + hashlib.sha256(statement + b"\0" + identity.encode()).hexdigest()
    had = destination.existing(SIGNATURE)
    if had and had[1] and had[2] == mark:
        copied.files[SIGNATURE] = (had[0], had[1])
        copied.skipped.append(SIGNATURE)
    else:
        bundle = signer.sign(statement)
        opened = lambda _o: io.BytesIO(bundle)  # noqa: E731
        entry = FileEntry(SIGNATURE, len(bundle), opened, mark, seekable=False)
        with HashingReader(io.BytesIO(bundle)) as reader:
            copied.files[SIGNATURE] = (len(bundle), destination.write(entry, reader, _Quiet()))
    copied.order.append(SIGNATURE)
    copied.signed_by, copied.root_digest = identity, manifest.root_digest


def build_signer(cfg: TransferConfig) -> Any:
    from modelhooks.adapters.signing import KeySigner, SigstoreSigner, SigstoreTrust

    if cfg.get("signing_key"):
        return KeySigner.from_file(Path(cfg.get("signing_key")))
    from modelhooks.adapters.signing import sigstore_env_state
    from modelhooks.core.settings import load_settings

    keyless = load_settings().signing  # a trust config instead of SIGSTORE_*, as `sign`
    trust_config = Path(keyless.trust_config) if keyless.trust_config else None
    if sigstore_env_state() != "all" and trust_config is None:
        raise ConfigError(
            "--sign true: no signer configured: set SIGSTORE_TUF_URL, SIGSTORE_FULCIO_URL and "
            "SIGSTORE_REKOR_URL (keyless), or MODEL_SYNC_SIGNING_KEY (an EC key)",
            setting="MODEL_SYNC_SIGN",
        )
    trust = SigstoreTrust.from_env(trust_config=trust_config)
    return SigstoreSigner(trust, Path(cfg.get("signing_identity_token_path")))


def transfer(
    cfg: TransferConfig,
    progress: Progress,
    *,
    registry: Any = None,
    signer: Any = None,
    after_begin: Callable[[Any], None] | None = None,
    ends: tuple[Any, Any] | None = None,
    event: str = "",
    at: str = "",
    owner: str | None = None,
) -> dict[str, Any]:
    """Claim, begin, copy, sign, finish (module docstring); the ids and URI as a dict.
    `ends`: the source and destination, instead of those the configuration names; `event`,
    `at`: the delivery this run is and its request's time (recorded on the artifact it
    makes LIVE: register.finish); `owner`: the tenant the request acts for (the function's,
    tenancy on), whose models alone it may register into (register.begin)."""
    from modelhooks.adapters.transfer import register

    source, destination = ends or (build_source(cfg), build_destination(cfg))
    if cfg.sign and signer is None:
        signer = build_signer(cfg)  # before anything moves: a missing signer is an error now
    if registry is not None:  # what the registry refuses claims no destination
        register.check(registry, cfg, at=at, owner=owner)
    claimed = False  # this run created the destination's claim
    if hasattr(destination, "claim"):
        run = event or f"{socket.gethostname()} pid {os.getpid()}"
        claimed = destination.claim(source_key(getattr(source, "uri", "")), run)
    target, into, copying = None, Copied(), False
    try:
        if registry is not None:
            target = register.begin(registry, cfg, destination.uri, at=at, owner=owner)
        if after_begin is not None:
            after_begin(target)
        copying = True
        copied = copy(source, destination, progress, into)
        if signer is not None:
            name = destination.uri.rstrip("/").rsplit("/", 1)[-1].split(":")[0].split("@")[0]
            _sign(copied, destination, signer, name)
        if hasattr(destination, "finish"):
            copied.uri = destination.finish(copied.order)
    except (ModelhooksError, OSError, KeyboardInterrupt) as exc:
        if target is not None:
            if isinstance(exc, ModelhooksError):
                reason = exc.message
            elif isinstance(exc, KeyboardInterrupt):
                reason = f"interrupted: {exc or 'Ctrl-C'}; a re-run resumes"
            else:
                reason = f"{type(exc).__name__}: {exc}"
            try:
                register.fail(registry, target, reason, at=at)
            except ModelhooksError as again:
                _log.error("could not record the failure in the registry: %s", again.message)
        if claimed and copying and not into.begun and isinstance(exc, ModelhooksError):
            _release(destination, exc)
        raise
    result: dict[str, Any] = {
        "uri": copied.uri,
        "digest": copied.digest,
        "files": len([p for p in copied.files if p != SIGNATURE]),
        "bytes": sum(s for p, (s, _) in copied.files.items() if p != SIGNATURE),
        "skipped": len(copied.skipped),
        "signed_by": copied.signed_by,
    }
    if target is not None:
        extra: dict[str, str] = {}
        if copied.signed_by:  # on the version, as `sign` writes it (else on the artifact)
            signature = _signature(copied)
            if not register.record_signature(registry, target, signature):
                extra = signature
        artifact = register.finish(
            registry, target, copied.uri, copied.digest, extra, event=event, at=at
        )
        result.update(
            {**target.ids(), "model_artifact_id": artifact.id, "state": str(artifact.state)}
        )
    return result


def _release(destination: Any, failure: ModelhooksError) -> None:
    """The claim this run created let go, its copy having failed for good before its
    source showed a file (nothing of it copied): a source misspelled, empty, not there or
    denied does not keep the destination from the source meant (stores.release). A
    transient failure keeps it (Unavailable, credentials refused, Throttled: a duplicate
    delivery of this source, which found the claim, may be copying); a source's permanent
    failure is the duplicate's too."""
    if isinstance(failure, Transient):
        return
    try:
        destination.release()
    except ModelhooksError as again:
        _log.error("could not release %s's claim: %s", destination.uri, again.message)


def source_key(uri: str) -> str:
    """A source as a destination's claim names it: its URI, an http(s) one without its
    query, fragment and user info (a presigned URL's signature changes with each run of
    the same source, and is a credential), a prefix without its trailing slash.

    >>> source_key("https://u:p@host/m.tar?X-Amz-Signature=1#x"), source_key("s3://b/m/")
    ('https://host/m.tar', 's3://b/m')
    """
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri)
    if parts.scheme.lower() in ("http", "https"):
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme.lower(), host, parts.path, "", ""))
    return uri.rstrip("/")


def _signature(copied: Copied) -> dict[str, str]:
    """The properties `sign` writes for a signature: where it is (model.sig next to the
    model; in an OCI image, a file of the image the URI names), what it signed, who."""
    oci = copied.uri.startswith("oci://")
    return {
        "signature.uri": copied.uri if oci else f"{copied.uri.rstrip('/')}/{SIGNATURE}",
        "signature.root_digest": f"sha256:{copied.root_digest}",
        "signature.signer": copied.signed_by,
        "signature.artifact_digest": copied.digest,
    }


class _Quiet:
    def start(self, total: int | None) -> None:
        pass

    def advance(self, n: int) -> None:
        pass


def write_termination_message(path: str, result: dict[str, Any], *, default: bool) -> None:
    """The result as JSON where Kubernetes reads a container's termination message; the
    default path may not exist outside a Pod (then nothing is written)."""
    try:
        Path(path).write_text(json.dumps(result, sort_keys=True))
    except OSError:
        if not default:
            raise
        _log.debug("no termination message at %s (not in a Pod)", path)
