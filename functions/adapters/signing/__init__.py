"""Model signing and verification in model-signing's format (sigstore/model-transparency),
streamed from where the model lies through the ObjectStore port.

    manifest   the model-signing manifest and in-toto Statement (pure)
    streaming  parallel ranged-read hashing with bounded memory
    bundle     Sigstore bundle v0.3 / DSSE envelope reading and assembly
    keys       EC key and certificate signers / verifiers
    keyless    Sigstore keyless signer / verifier: the identity token, errors per service
    trust      where a Sigstore instance's trust comes from (file, trusted root, TUF, URLs)
    config     SigningConfig: method, key material, the enabling rule
    model      sign_model / verify_model / verify_bundle
    local      local directories (symlink policy)

Heavy libraries (model_signing, sigstore, cryptography, blake3) load on first use only.

>>> from modelhooks.adapters.signing import HashOptions, KeySigner, sign_model  # doctest: +SKIP
>>> sign_model(store, "models", "bert/1", KeySigner.from_file(Path("key.pem")))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelhooks.adapters.signing.config import SigningConfig
    from modelhooks.adapters.signing.keyless import (
        SigstoreSigner,
        SigstoreTrust,
        SigstoreVerifier,
        sigstore_env_state,
    )
    from modelhooks.adapters.signing.keys import (
        CertificateSigner,
        CertificateVerifier,
        KeySigner,
        KeyVerifier,
    )
    from modelhooks.adapters.signing.local import local_model
    from modelhooks.adapters.signing.manifest import Manifest, Resource, Serialization
    from modelhooks.adapters.signing.model import (
        Location,
        Signed,
        Verified,
        sign_model,
        signature_key,
        verify_bundle,
        verify_model,
    )
    from modelhooks.adapters.signing.streaming import HashOptions, Progress, hash_model

# What sign writes next to a model's signature: the binding statement of its objects
# (binding.py). Here, not there: the composition root leaves both out of a model's content
# without loading signing.
SUFFIX = ".binding"


def binding_key(signature_key: str) -> str:
    return signature_key + SUFFIX


# The facade loads a submodule on first use of one of its names (PEP 562): importing one
# piece (e.g. HashOptions in the composition root) must not load all of signing.
_WHERE = {
    "SigningConfig": "config",
    "SigstoreSigner": "keyless",
    "SigstoreTrust": "keyless",
    "SigstoreVerifier": "keyless",
    "sigstore_env_state": "keyless",
    "CertificateSigner": "keys",
    "CertificateVerifier": "keys",
    "KeySigner": "keys",
    "KeyVerifier": "keys",
    "local_model": "local",
    "Manifest": "manifest",
    "Resource": "manifest",
    "Serialization": "manifest",
    "Location": "model",
    "Signed": "model",
    "Verified": "model",
    "sign_model": "model",
    "signature_key": "model",
    "verify_bundle": "model",
    "verify_model": "model",
    "HashOptions": "streaming",
    "Progress": "streaming",
    "hash_model": "streaming",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'modelhooks.adapters.signing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"modelhooks.adapters.signing.{_WHERE[name]}"), name)


__all__ = [
    "SUFFIX",
    "CertificateSigner",
    "CertificateVerifier",
    "HashOptions",
    "KeySigner",
    "KeyVerifier",
    "Location",
    "Manifest",
    "Progress",
    "Resource",
    "Serialization",
    "Signed",
    "SigningConfig",
    "SigstoreSigner",
    "SigstoreTrust",
    "SigstoreVerifier",
    "Verified",
    "binding_key",
    "hash_model",
    "local_model",
    "sign_model",
    "signature_key",
    "sigstore_env_state",
    "verify_bundle",
    "verify_model",
]
