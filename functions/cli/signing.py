"""`modelhooks sign URI` / `modelhooks verify URI`: model-signing signatures for a model in a
local directory, gs:// or s3://, hashed where it lies (no local copy).

    modelhooks sign ./bert --key key.pem
    modelhooks sign gs://models/bert/1 --key leaf.key --certificate leaf.crt --certificate-chain ca.crt
    modelhooks sign s3://models/bert/1 --identity-token /var/run/secrets/sigstore/token
    modelhooks verify ./bert --public-key key.pub
    modelhooks verify s3://models/bert/1 --identity me@example.com --issuer https://accounts.example.com
    modelhooks sign oci://127.0.0.1:5000/models/bert:v1 --key key.pem   (bundle pushed as a referrer)

Exit status: 0 signed / verified, 1 verification failed, 2 any other error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from modelhooks.adapters.signing.model import Location
from modelhooks.adapters.signing.streaming import HashOptions
from modelhooks.core.errors import BadRequest, ConfigError, VerificationFailed
from modelhooks.core.ports import ObjectStore, Signer, Verifier

__all__ = ["add_commands"]


class _Bar:
    """A tqdm progress bar on stderr, fed from the hashing threads."""

    def __init__(self, label: str, quiet: bool) -> None:
        self._label, self._quiet = label, quiet
        self._bar: Any = None

    def start(self, total_bytes: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=total_bytes,
            desc=self._label,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=self._quiet,
        )

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _store(uri: str, allow_symlinks: bool) -> tuple[ObjectStore, str, str, Path | None]:
    """(store, bucket, prefix, local directory or None) for a model URI or path."""
    from modelhooks.adapters.signing.local import local_model

    if uri.startswith("gs://") or uri.startswith("s3://"):
        bucket, _, prefix = uri[5:].partition("/")
        if not bucket:
            raise BadRequest(f"{uri} names no bucket")
        store: ObjectStore
        if uri.startswith("gs://"):
            from modelhooks.adapters.object_store.gcs import GcsObjectStore

            store = GcsObjectStore()
        else:
            from modelhooks.adapters.object_store.s3 import S3ObjectStore

            store = S3ObjectStore()
        return store, bucket, prefix, None
    path = Path(uri.removeprefix("file://"))
    return (*local_model(path, allow_symlinks=allow_symlinks), path.absolute())


def _signature(value: str | None, local: Path | None) -> tuple[str | None, Location | None]:
    """--signature: a name inside the model (no "/"; returned as the signature name), or a
    location: a gs:// / s3:// object or a local file (inside a local model: a name again)."""
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.adapters.signing.model import signature_key

    if value is None:
        return None, None
    if value.startswith(("gs://", "s3://")):
        base, _, name = value.rpartition("/")
        store, bucket, prefix, _ = _store(base, allow_symlinks=False)
        return None, Location(store, bucket, signature_key(prefix, name))
    if "/" not in value:
        return value, None
    path = Path(value).absolute()
    if local is not None and path.is_relative_to(local.absolute()):
        return path.relative_to(local.absolute()).as_posix(), None
    return None, Location(LocalObjectStore(path.parent.parent), path.parent.name, path.name)


def _options(args: argparse.Namespace, signature_name: str | None) -> HashOptions:
    return HashOptions(
        hash_type=args.hash,
        method="shards" if args.shard_size else "files",
        shard_size=args.shard_size or 1_000_000_000,
        allow_symlinks=args.allow_symlinks,
        signature_name=signature_name or "model.sig",
        ready_marker=args.ready_marker,
        ignore_paths=tuple(args.ignore or ()),
    )


def _signer(args: argparse.Namespace) -> Signer:
    from modelhooks.adapters.signing import (
        CertificateSigner,
        KeySigner,
        SigstoreSigner,
        SigstoreTrust,
    )

    password = args.password_file.read_text().strip() if args.password_file else None
    if args.certificate:
        if not args.key:
            raise ConfigError("--certificate needs --key (the certificate's private key)")
        chain = args.certificate_chain or []
        return CertificateSigner.from_files(args.key, args.certificate, chain, password)
    if args.key:
        return KeySigner.from_file(args.key, password)
    if args.identity_token:
        trust = SigstoreTrust.from_env(trust_config=args.trust_config)
        return SigstoreSigner(trust, args.identity_token)
    raise ConfigError("choose a method: --key, --certificate with --key, or --identity-token")


def _verifier(args: argparse.Namespace) -> Verifier:
    from modelhooks.adapters.signing import (
        CertificateVerifier,
        KeyVerifier,
        SigstoreTrust,
        SigstoreVerifier,
    )

    if args.public_key:
        return KeyVerifier(args.public_key)
    if args.certificate_chain:
        return CertificateVerifier(args.certificate_chain)
    if args.identity and args.issuer:
        trust = SigstoreTrust.from_env(trust_config=args.trust_config)
        return SigstoreVerifier(trust, args.identity, args.issuer)
    raise ConfigError(
        "choose a method: --public-key, --certificate-chain, or --identity with --issuer"
    )


def _print_signed(signed: Any) -> None:
    print(f"signer: {signed.signer}")
    print(f"root digest: sha256:{signed.root_digest}")
    print(f"signature: {signed.bucket}/{signed.key}")
    print(f"verdict: {'signed' if signed.created else 'already signed (unchanged)'}")


def cmd_sign(args: argparse.Namespace) -> int:
    from modelhooks.adapters.signing import sign_model

    if args.uri.startswith("oci://"):
        from modelhooks.adapters.signing.oci import client_for, sign_oci

        client, repo, ref = client_for(args.uri)
        _print_signed(sign_oci(client, repo, ref, _signer(args), options=_options(args, None)))
        return 0
    store, bucket, prefix, local = _store(args.uri, args.allow_symlinks)
    name, at = _signature(args.signature, local)
    signer = _signer(args)
    bar = _Bar("hashing", args.quiet)
    try:
        signed = sign_model(
            store,
            bucket,
            prefix,
            signer,
            options=_options(args, name),
            at=at,
            replace=args.replace,
            progress=bar,
        )
    finally:
        bar.close()
    _print_signed(signed)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from modelhooks.adapters.signing import verify_model

    verifier = _verifier(args)
    bar = _Bar("verifying", args.quiet)
    try:
        if args.uri.startswith("oci://"):
            from modelhooks.adapters.signing.oci import client_for, verify_oci

            client, repo, ref = client_for(args.uri)
            options = _options(args, None)
            expected = args.expected_digest
            verified = verify_oci(
                client, repo, ref, verifier, options=options, expected_digest=expected
            )
        else:
            store, bucket, prefix, local = _store(args.uri, args.allow_symlinks)
            name, at = _signature(args.signature, local)
            verified = verify_model(
                store,
                bucket,
                prefix,
                verifier,
                options=_options(args, name),
                at=at,
                expected_digest=args.expected_digest,
                progress=bar,
            )
    except VerificationFailed as e:
        bar.close()
        print(f"verdict: FAILED\n{e.diagnostics()}")
        return 1
    finally:
        bar.close()
    print(f"signer: {verified.signer} (trusted: {verifier.identity()})")
    print(f"root digest: sha256:{verified.root_digest}")
    print(f"verdict: OK ({len(verified.manifest.resources)} resources match)")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "uri",
        help="the model: a local directory, gs://bucket/prefix, s3://bucket/prefix, "
        "or oci://host/repository[:tag|@digest] (signature pushed as a referrer)",
    )
    p.add_argument(
        "--signature",
        metavar="PATH",
        help="where the signature is: a name inside the model (default model.sig), "
        "a local file, or a gs:// / s3:// object",
    )
    p.add_argument("--hash", choices=["sha256", "blake3"], default="sha256")
    p.add_argument(
        "--shard-size",
        type=int,
        default=0,
        metavar="BYTES",
        help="hash files in shards of this size (model_signing's shard mode; sign only)",
    )
    p.add_argument("--ignore", action="append", metavar="PATH", help="a path to leave out")
    p.add_argument("--ready-marker", default="_SUCCESS", metavar="NAME", help="always left out")
    p.add_argument("--allow-symlinks", action="store_true", help="follow symbolic links (local)")
    p.add_argument("--trust-config", type=Path, metavar="JSON", help="Sigstore ClientTrustConfig")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `sign` and `verify` to the `modelhooks` command line."""
    sign = subparsers.add_parser("sign", help="sign a model where it lies (model-signing format)")
    _common(sign)
    sign.add_argument("--key", type=Path, metavar="PEM", help="EC private key (P-256/384/521)")
    sign.add_argument("--password-file", type=Path, metavar="FILE", help="the key's password")
    sign.add_argument("--certificate", type=Path, metavar="PEM", help="signing certificate")
    sign.add_argument(
        "--certificate-chain", type=Path, action="append", metavar="PEM", help="intermediates"
    )
    sign.add_argument(
        "--identity-token",
        type=Path,
        metavar="FILE",
        help="OIDC token file for Sigstore keyless signing (SIGSTORE_*_URL select the instance)",
    )
    sign.add_argument("--replace", action="store_true", help="overwrite a different signature")
    sign.set_defaults(func=cmd_sign)

    verify = subparsers.add_parser("verify", help="verify a model against its signature")
    _common(verify)
    verify.add_argument("--public-key", type=Path, metavar="PEM", help="trusted EC public key")
    verify.add_argument(
        "--certificate-chain",
        type=Path,
        action="append",
        metavar="PEM",
        help="trusted root/intermediate certificates (repeatable)",
    )
    verify.add_argument("--identity", help="Sigstore: the expected signer identity")
    verify.add_argument("--issuer", help="Sigstore: the expected OIDC issuer")
    verify.add_argument(
        "--expected-digest", metavar="SHA256", help="reject a signature over another root digest"
    )
    verify.set_defaults(func=cmd_verify)
