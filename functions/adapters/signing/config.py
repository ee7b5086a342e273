"""Signing configuration for the composition root: which method, which key material, and
whether signing is on at all.

Enabling rule (the one Kubeflow's async-upload job follows, plus keys): an explicit on/off
wins; unset → on when a key or certificate is configured, or when all three of
SIGSTORE_TUF_URL / SIGSTORE_FULCIO_URL / SIGSTORE_REKOR_URL are set; when only some of them
are set, signing is off and a warning says which are missing.

>>> SigningConfig(key=Path("k.pem")).enabled(env={})
(True, 'a signing key is configured')
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from modelhooks.core.errors import ConfigError

__all__ = ["DEFAULT_TOKEN_PATH", "SigningConfig", "read_password"]

DEFAULT_TOKEN_PATH = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

if TYPE_CHECKING:
    from modelhooks.adapters.signing.manifest import HashType
    from modelhooks.adapters.signing.streaming import HashOptions
    from modelhooks.core.ports import Signer, Verifier
    from modelhooks.core.settings import SigningSettings

_log = logging.getLogger("modelhooks.signing")


class SigningConfig(msgspec.Struct, frozen=True):
    """Everything `sign` / `verify` need, as plain values (paths are read on build)."""

    enabled_flag: bool | None = None  # explicit on/off; None = decide from what is set
    key: Path | None = None  # EC private key (key method, or the certificate's key)
    password_file: Path | None = None
    certificate: Path | None = None  # certificate method
    certificate_chain: tuple[Path, ...] = ()  # intermediates (sign) / trusted roots (verify)
    public_key: Path | None = None  # key method, verify
    identity_token: Path | None = None  # keyless: OIDC token file
    trust_config: Path | None = None  # keyless: ClientTrustConfig JSON
    identity: str = ""  # keyless verify: expected identity
    issuer: str = ""  # keyless verify: expected OIDC issuer
    signature_name: str = "model.sig"
    ready_marker: str = "_SUCCESS"
    hash: HashType = "sha256"
    shard_size: int = 0  # 0 = one digest per file (model_signing's default)

    @classmethod
    def from_settings(cls, section: SigningSettings, *, ready_marker: str) -> SigningConfig:
        """The `signing` settings section, as paths and flags."""

        def path(value: str) -> Path | None:
            return Path(value) if value else None

        return cls(
            enabled_flag={"": None, "true": True, "false": False}[section.enabled],
            key=path(section.key),
            password_file=path(section.password_file),
            certificate=path(section.certificate),
            certificate_chain=tuple(
                Path(p.strip()) for p in section.certificate_chain.split(",") if p.strip()
            ),
            public_key=path(section.public_key),
            identity_token=path(section.identity_token),
            trust_config=path(section.trust_config),
            identity=section.identity,
            issuer=section.issuer,
            signature_name=section.signature_name,
            ready_marker=ready_marker,
            hash=section.hash,
            shard_size=section.shard_size,
        )

    def enabled(self, env: Mapping[str, str] | None = None) -> tuple[bool, str]:
        """(on?, why) per the enabling rule; logs a warning for a partial Sigstore setup."""
        env = os.environ if env is None else env
        if self.enabled_flag is not None:
            return self.enabled_flag, f"signing explicitly {'on' if self.enabled_flag else 'off'}"
        if self.certificate:
            return True, "a signing certificate is configured"
        if self.key:
            return True, "a signing key is configured"
        from modelhooks.adapters.signing.keyless import ENV_URLS, sigstore_env_state

        state = sigstore_env_state(env)
        if state == "all":
            return True, "SIGSTORE_TUF_URL, SIGSTORE_FULCIO_URL and SIGSTORE_REKOR_URL are set"
        if state == "some":
            missing = ", ".join(n for n in ENV_URLS if not env.get(n))
            why = f"signing skipped: only some Sigstore URLs are set (missing {missing})"
            _log.warning(why)
            return False, why
        return False, "no signing method configured"

    def options(self) -> HashOptions:
        from modelhooks.adapters.signing.streaming import HashOptions  # on first use: threads

        return HashOptions(
            hash_type=self.hash,
            method="shards" if self.shard_size else "files",
            shard_size=self.shard_size or 1_000_000_000,
            signature_name=self.signature_name,
            ready_marker=self.ready_marker,
        )

    def signer(self, env: Mapping[str, str] | None = None) -> Signer | None:
        """The configured signer, or None when signing is off."""
        if not self.enabled(env)[0]:
            return None
        # each method's module when it is the one configured: a key's needs no Sigstore
        password = read_password(self.password_file, "MODELHOOKS_SIGNING_PASSWORD_FILE")
        if self.certificate:
            from modelhooks.adapters.signing.keys import CertificateSigner

            if not self.key:
                raise ConfigError("signing.certificate needs signing.key (its private key)")
            return CertificateSigner.from_files(
                self.key, self.certificate, self.certificate_chain, password
            )
        if self.key:
            from modelhooks.adapters.signing.keys import KeySigner

            return KeySigner.from_file(self.key, password)
        from modelhooks.adapters.signing.keyless import SigstoreSigner, SigstoreTrust

        # unset: the pod's service-account token, as Kubeflow's async-upload job reads it
        # (infra/knative projects one with audience sigstore and points the setting at it)
        token = self.identity_token or DEFAULT_TOKEN_PATH
        trust = SigstoreTrust.from_env(env, trust_config=self.trust_config)
        return SigstoreSigner(trust, token)

    def verifier(self, env: Mapping[str, str] | None = None) -> Verifier:
        from modelhooks.adapters.signing.keyless import SigstoreTrust, SigstoreVerifier
        from modelhooks.adapters.signing.keys import CertificateVerifier, KeyVerifier

        if self.public_key:
            return KeyVerifier(self.public_key)
        if self.certificate_chain:
            return CertificateVerifier(self.certificate_chain)
        if self.identity and self.issuer:
            trust = SigstoreTrust.from_env(env, trust_config=self.trust_config)
            return SigstoreVerifier(trust, self.identity, self.issuer)
        raise ConfigError(
            "no verification method: set signing.public_key, signing.certificate_chain, "
            "or signing.identity with signing.issuer"
        )


def read_password(path: Path | None, setting: str) -> str | None:
    """The key's password: text of at most MAX_PEM_BYTES (a file of random bytes exited 70
    with the codec's error, `/dev/zero` was read without end)."""
    if path is None:
        return None
    from modelhooks.adapters.signing.keys import read_small

    try:
        return read_small(path).decode().strip()
    except OSError as exc:
        raise ConfigError(f"{setting}={path}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:  # its message quotes a byte of the password: not shown
        raise ConfigError(f"{setting}={path}: not UTF-8 text") from None
    except ValueError as exc:
        raise ConfigError(f"{setting}={path}: {exc}") from None
