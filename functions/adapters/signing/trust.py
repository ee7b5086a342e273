"""Where a Sigstore instance's trust comes from: its trusted root (Fulcio CA, CT logs, Rekor
keys, timestamp authorities) and its signing config (which services to sign with).

First match wins:
1. a ClientTrustConfig JSON file (`signing.trust_config`, `--trust-config`), as
   `model_signing --trust_config` takes;
2. `SIGSTORE_TRUSTED_ROOT`: a `trusted_root.json` file; the services are then the
   `SIGSTORE_FULCIO_URL` / `SIGSTORE_REKOR_URL` / `SIGSTORE_TSA_URL` below;
3. `SIGSTORE_TUF_URL`, the instance's TUF repository (`SIGSTORE_TUF_ROOT`: its initial
   root.json, as sigstore clients take it for a private instance);
4. the public-good instance.

`SIGSTORE_FULCIO_URL`, `SIGSTORE_REKOR_URL` and `SIGSTORE_TSA_URL` replace the services of
the signing config, keeping the API version the instance lists for them (Rekor: 2, the
rekor-tiles log, when it lists none; a TSA URL without a path gets `/api/v1/timestamp`).

>>> SigstoreTrust.from_env({"SIGSTORE_TSA_URL": "http://tsa:3000"}).tsa_url
'http://tsa:3000/api/v1/timestamp'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from modelhooks.core.errors import ConfigError, Unavailable

__all__ = ["ENV_URLS", "SigstoreTrust", "sigstore_env_state"]

ENV_URLS = ("SIGSTORE_TUF_URL", "SIGSTORE_FULCIO_URL", "SIGSTORE_REKOR_URL")
TSA_PATH = "/api/v1/timestamp"
PUBLIC_GOOD_TUF_URL = (
    "https://tuf-repo-cdn.sigstore.dev"  # what ClientTrustConfig.production() reads
)
SIGNING_CONFIG_TYPE: Final = "application/vnd.dev.sigstore.signingconfig.v0.2+json"
TRUST_CONFIG_TYPE: Final = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
# (signing config field, env variable, API version when the instance lists none)
SERVICES = (
    ("ca_urls", "SIGSTORE_FULCIO_URL", 1),
    ("rekor_tlog_urls", "SIGSTORE_REKOR_URL", 2),
    ("tsa_urls", "SIGSTORE_TSA_URL", 1),
)
SUPPORTED = {"ca_urls": (1,), "rekor_tlog_urls": (1, 2), "tsa_urls": (1,)}


def sigstore_env_state(env: Mapping[str, str] | None = None) -> str:
    """ "all", "some" or "none" of SIGSTORE_{TUF,FULCIO,REKOR}_URL are set."""
    env = os.environ if env is None else env
    count = sum(bool(env.get(name)) for name in ENV_URLS)
    return "all" if count == len(ENV_URLS) else "some" if count else "none"


def _tsa(url: str | None) -> str | None:
    if url and urlsplit(url).path in ("", "/"):
        return url.rstrip("/") + TSA_PATH
    return url


@dataclass(frozen=True)
class SigstoreTrust:
    """Where to find the Sigstore instance: see the module docstring."""

    trust_config: Path | None = None
    trusted_root: Path | None = None
    tuf_url: str | None = None
    tuf_root: Path | None = None
    fulcio_url: str | None = None
    rekor_url: str | None = None
    tsa_url: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tsa_url", _tsa(self.tsa_url))

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, trust_config: Path | None = None
    ) -> SigstoreTrust:
        env = os.environ if env is None else env

        def path(name: str) -> Path | None:
            return Path(env[name]) if env.get(name) else None

        return cls(
            trust_config=trust_config,
            trusted_root=path("SIGSTORE_TRUSTED_ROOT"),
            tuf_url=env.get("SIGSTORE_TUF_URL") or None,
            tuf_root=path("SIGSTORE_TUF_ROOT"),
            fulcio_url=env.get("SIGSTORE_FULCIO_URL") or None,
            rekor_url=env.get("SIGSTORE_REKOR_URL") or None,
            tsa_url=env.get("SIGSTORE_TSA_URL") or None,
        )

    def load(self) -> Any:
        """The sigstore `ClientTrustConfig` to sign with. ConfigError names the file or the
        field that is wrong; Unavailable when the TUF repository does not answer."""
        from sigstore.errors import Error
        from sigstore.models import ClientTrustConfig

        config = ClientTrustConfig(self._inner())
        self._override_services(config._inner.signing_config)
        try:
            config.signing_config  # noqa: B018 - validates the services now, not mid-signature
            config.trusted_root  # noqa: B018
        except (Error, ValueError) as e:
            raise ConfigError(f"Sigstore trust ({self._source()}): {e}") from None
        inner = config._inner.signing_config
        if {s.major_api_version for s in inner.rekor_tlog_urls} == {2} and not inner.tsa_urls:
            raise ConfigError(
                f"Sigstore trust ({self._source()}): Rekor v2 entries carry no time, a "
                "timestamp authority is needed: set SIGSTORE_TSA_URL"
            )
        return config

    def verifying_root(self) -> Any:
        """The sigstore `TrustedRoot` to verify with (no signing services needed)."""
        from sigstore.models import TrustedRoot

        try:
            return TrustedRoot(self._inner(signing=False).trusted_root)
        except ValueError as e:
            raise ConfigError(f"Sigstore trust ({self._source()}): {e}") from None

    @property
    def private(self) -> bool:
        """A private instance (a trust config, a trusted root or a TUF repository is named),
        not the public-good one."""
        return bool(self.trust_config or self.trusted_root or self.tuf_url)

    def root_json(self) -> str:
        """The trusted root's JSON: what a verifier elsewhere (an init container with no
        access to this trust's files or TUF repository) needs to verify as this one does."""
        try:
            return str(self._inner(signing=False).trusted_root.to_json())
        except ValueError as e:
            raise ConfigError(f"Sigstore trust ({self._source()}): {e}") from None

    def _source(self) -> str:
        if self.trust_config:
            return f"trust config {self.trust_config}"
        if self.trusted_root:
            return f"SIGSTORE_TRUSTED_ROOT={self.trusted_root}"
        if self.tuf_url:
            return f"SIGSTORE_TUF_URL={self.tuf_url}"
        return "the public-good instance"

    def _inner(self, signing: bool = True) -> Any:
        from pydantic import ValidationError
        from sigstore_models.trustroot.v1 import ClientTrustConfig, SigningConfig, TrustedRoot

        try:
            if self.trust_config:
                return ClientTrustConfig.from_json(self._read(self.trust_config, "trust config"))
            if self.trusted_root:
                root = TrustedRoot.from_json(self._read(self.trusted_root, "trusted root"))
                if signing and not (self.fulcio_url and self.rekor_url):
                    raise ConfigError(
                        f"SIGSTORE_TRUSTED_ROOT={self.trusted_root} names no services: "
                        "set SIGSTORE_FULCIO_URL and SIGSTORE_REKOR_URL"
                    )
                empty = SigningConfig(media_type=SIGNING_CONFIG_TYPE)
                return ClientTrustConfig(
                    media_type=TRUST_CONFIG_TYPE, trusted_root=root, signing_config=empty
                )
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "(document)"
            raise ConfigError(
                f"Sigstore {self._source()} is malformed at {field}: {first['msg']}",
                field=field,
            ) from None
        return self._from_tuf()._inner

    def _read(self, path: Path, what: str) -> str:
        try:
            return path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"Sigstore {what} {path} cannot be read ({e})") from None

    def _from_tuf(self) -> Any:
        from sigstore.errors import TUFError
        from sigstore.models import ClientTrustConfig

        if self.tuf_root and not self.tuf_root.is_file():
            raise ConfigError(f"SIGSTORE_TUF_ROOT={self.tuf_root}: no such file")
        try:
            if self.tuf_url:
                return ClientTrustConfig.from_tuf(self.tuf_url, bootstrap_root=self.tuf_root)
            return ClientTrustConfig.production()
        except TUFError as e:
            cause = e.__cause__ or e
            if _network(cause):
                url = self.tuf_url or PUBLIC_GOOD_TUF_URL
                raise Unavailable(
                    f"the Sigstore TUF repository {self.tuf_url or 'public-good'} did not "
                    f"answer: {_reason(cause)}",
                    url=url,
                ) from None
            raise ConfigError(f"Sigstore {self._source()}: {e}: {cause}") from None

    def _override_services(self, signing_config: Any) -> None:
        from sigstore_models.trustroot.v1 import Service

        for field, _env, default in SERVICES:
            url = {"ca_urls": self.fulcio_url, "rekor_tlog_urls": self.rekor_url}.get(
                field, self.tsa_url
            )
            if not url:
                continue
            listed = [
                s.major_api_version
                for s in getattr(signing_config, field)
                if s.major_api_version in SUPPORTED[field]
            ]
            version = max(listed, default=default)
            service = Service(url=url.rstrip("/"), major_api_version=version, operator="modelhooks")
            setattr(signing_config, field, [service])


def _reason(error: BaseException) -> str:
    """Why a TUF download failed: the innermost error that says something (tuf's
    SlowRetrievalError says nothing; the socket's refusal or failed lookup under it does)."""
    said, seen = str(error), error.__cause__ or error.__context__
    while seen is not None:
        said = str(seen) or said
        seen = seen.__cause__ or seen.__context__
    return said or type(error).__name__


def _network(error: BaseException) -> bool:
    """Whether a TUF failure is the repository not answering (vs bad metadata)."""
    from tuf.api.exceptions import DownloadError

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, DownloadError | OSError | ConnectionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
