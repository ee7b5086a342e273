"""`modelhooks verify URI`: verify a model where it lies against its signature.

    modelhooks verify ./bert --public-key key.pub
    modelhooks verify s3://models/bert/1 --identity me@example.com --issuer https://accounts.example.com
    modelhooks verify oci://127.0.0.1:5000/models/bert:v1 --public-key key.pub
    modelhooks verify /models/bert --trust-json '{"keys": [{"name": "team", "pem": "…"}]}'

--trust-json (or MODELHOOKS_VERIFY_TRUST) is what a VerificationPolicy trusts, as its spec
says it (keys, certificateChains, identities): the model is accepted when ANY of them signed
it; or `{"allOf": [spec, …]}` (each named by a `name`), what several policies trust: accepted
when EVERY one of them accepts the signature; a `trustedRoot` beside them (a
trusted_root.json) is the Sigstore root the identities verify against. The init containers
of `verifyOn: node` policies run it so.

Exit status: 0 verified, 1 verification failed, 2 a bad argument or model, 3 the store did
not answer, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from modelhooks.cli import common, model_args
from modelhooks.core.errors import ConfigError, VerificationFailed
from modelhooks.core.node_verification import TRUST_ENV
from modelhooks.core.ports import Verifier

__all__ = ["add_parser"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> None:
    verify = subparsers.add_parser("verify", help="verify a model against its signature")
    model_args.add_model_arguments(verify)
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
        "--trust-json",  # not given: TRUST_ENV, read by _verifier
        metavar="JSON",
        help="what a VerificationPolicy trusts ({keys, certificateChains, identities} as its "
        "spec says, and an optional trustedRoot for the identities): accepted when ANY of them "
        'verifies; {"allOf": [spec, ...]}: when EVERY spec accepts it (several policies) '
        f"(env {TRUST_ENV})",
    )
    verify.add_argument(
        "--expected-digest", metavar="SHA256", help="reject a signature over another root digest"
    )
    verify.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modelhooks.adapters.signing import verify_model

    verifier = _verifier(args)
    bar = model_args.Bar("verifying", args.quiet)
    try:
        with common.interruptible(lambda: f"{bar.so_far()}; nothing was verified"):
            if args.uri.startswith("oci://"):
                from modelhooks.adapters.oci.clients import OciClients
                from modelhooks.adapters.signing.oci import verify_oci

                client, repo, ref = OciClients().for_uri(args.uri)
                options = model_args.hash_options(args, None)
                expected = args.expected_digest
                verified = verify_oci(
                    client, repo, ref, verifier, options=options, expected_digest=expected
                )
            else:
                store, bucket, prefix, local = model_args.model_store(args.uri, args.allow_symlinks)
                name, at = model_args.signature_location(args.signature, local)
                verified = verify_model(
                    store,
                    bucket,
                    prefix,
                    verifier,
                    options=model_args.hash_options(args, name),
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


def _verifier(args: argparse.Namespace) -> Verifier:
    from modelhooks.adapters.signing import (
        CertificateVerifier,
        KeyVerifier,
        SigstoreTrust,
        SigstoreVerifier,
    )

    given, where = args.trust_json, "--trust-json is"
    if given is None and os.environ.get(TRUST_ENV):  # a mistake names the variable
        given = os.environ[TRUST_ENV]
        where = f"invalid setting {TRUST_ENV}={given!r} (environment):"
    if given:
        from modelhooks.adapters.signing.policy_trust import trusted

        try:
            spec = json.loads(given)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where} not JSON: {e}") from None
        return trusted(spec, str(_trust_config(args) or ""))
    if args.public_key:
        return KeyVerifier(args.public_key)
    if args.certificate_chain:
        return CertificateVerifier(args.certificate_chain)
    if args.identity and args.issuer:
        trust = SigstoreTrust.from_env(trust_config=_trust_config(args))
        return SigstoreVerifier(trust, args.identity, args.issuer)
    raise ConfigError(
        "choose a method: --public-key, --certificate-chain, --identity with --issuer, "
        "or --trust-json"
    )


def _trust_config(args: argparse.Namespace) -> Path | None:
    """--trust-config, else signing.trust_config (settings)."""
    from modelhooks.core.settings import load_settings

    configured = load_settings().signing.trust_config
    return args.trust_config or (Path(configured) if configured else None)
