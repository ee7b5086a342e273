"""`modelhooks sign URI`: sign a model where it lies, in model-signing's format.

    modelhooks sign ./bert --key key.pem
    modelhooks sign gs://models/bert/1 --key leaf.key --certificate leaf.crt --certificate-chain ca.crt
    modelhooks sign s3://models/bert/1 --identity-token /var/run/secrets/sigstore/token
    SIGSTORE_TUF_URL=… SIGSTORE_FULCIO_URL=… SIGSTORE_REKOR_URL=… modelhooks sign s3://models/bert/1
    modelhooks sign oci://127.0.0.1:5000/models/bert:v1 --key key.pem   (bundle pushed as a referrer)

Exit status: 0 signed, 2 a bad argument or model, 3 the store or a Sigstore service did not
answer, or the identity token (absent, expired, another audience) or its identity was
refused, 4 signed already with other content (--replace overwrites), 130 interrupted
(nothing signed).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from modelhooks.cli import common, model_args
from modelhooks.core.errors import ConfigError
from modelhooks.core.ports import Signer

__all__ = ["add_parser"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> None:
    sign = subparsers.add_parser("sign", help="sign a model where it lies (model-signing format)")
    model_args.add_model_arguments(sign)
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
        help="OIDC token file for Sigstore keyless signing, read for each signature (default: "
        "signing.identity_token, else the pod's service-account token); the instance: "
        "--trust-config or SIGSTORE_*_URL",
    )
    sign.add_argument("--replace", action="store_true", help="overwrite a different signature")
    sign.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks.adapters.signing import sign_model

    if args.uri.startswith("oci://"):
        from modelhooks.adapters.oci.clients import OciClients
        from modelhooks.adapters.signing.oci import sign_oci

        client, repo, ref = OciClients().for_uri(args.uri)
        model_args.print_signed(
            sign_oci(client, repo, ref, _signer(args), options=model_args.hash_options(args, None))
        )
        return 0
    store, bucket, prefix, local = model_args.model_store(args.uri, args.allow_symlinks)
    name, at = model_args.signature_location(args.signature, local)
    signer = _signer(args)
    bar = model_args.Bar("hashing", args.quiet)
    with common.interruptible(lambda: f"{bar.so_far()}; nothing was signed"):
        try:
            signed = sign_model(
                store,
                bucket,
                prefix,
                signer,
                options=model_args.hash_options(args, name),
                at=at,
                replace=args.replace,
                progress=bar,
            )
        finally:
            bar.close()
    model_args.print_signed(signed)
    return 0


def _signer(args: argparse.Namespace) -> Signer:
    from modelhooks.adapters.signing import (
        CertificateSigner,
        KeySigner,
        SigstoreSigner,
        SigstoreTrust,
        sigstore_env_state,
    )
    from modelhooks.adapters.signing.config import DEFAULT_TOKEN_PATH, read_password
    from modelhooks.core.settings import load_settings

    password = read_password(args.password_file, "--password-file")
    if args.certificate:
        if not args.key:
            raise ConfigError("--certificate needs --key (the certificate's private key)")
        chain = args.certificate_chain or []
        return CertificateSigner.from_files(args.key, args.certificate, chain, password)
    if args.key:
        return KeySigner.from_file(args.key, password)
    # keyless when a token, a trust config or the Sigstore instance's URLs are given; the
    # token and trust config default to the signing settings, then the pod's token
    keyless = load_settings().signing
    trust_config = args.trust_config or (
        Path(keyless.trust_config) if keyless.trust_config else None
    )
    if args.identity_token or trust_config or sigstore_env_state() == "all":
        token = args.identity_token or Path(keyless.identity_token or DEFAULT_TOKEN_PATH)
        return SigstoreSigner(SigstoreTrust.from_env(trust_config=trust_config), token)
    raise ConfigError(
        "choose a method: --key, --certificate with --key, or keyless: --identity-token, "
        "--trust-config, or SIGSTORE_TUF_URL, SIGSTORE_FULCIO_URL and SIGSTORE_REKOR_URL"
    )
