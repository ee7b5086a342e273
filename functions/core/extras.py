"""Optional libraries, by the pyproject extra that installs them (`pip install
'modelhooks[gcp]'`).

A missing optional library is a configuration error that names the extra to install
(`MissingExtra`, a ConfigError: exit 2 on the command line, a revision that does not start on
a platform), never an ImportError traceback, a 500 or a 503. The composition root requires,
at start-up, the extras of the backends its settings select (`require`); an import site an
adapter reaches outside it (a CLI command) is guarded the same way (`importing`).

>>> require("gcp", "store.backend=cloud")  # doctest: +SKIP
Traceback (most recent call last):
MissingExtra: store.backend=cloud needs the gcp extra (google.cloud.storage is not
installed): pip install 'modelhooks[gcp]'
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from modelhooks.core.errors import ConfigError

__all__ = ["MODULES", "MissingExtra", "importing", "missing", "require"]

# Each extra of pyproject.toml ([project.optional-dependencies]) → every module modelhooks'
# code paths import from it, directly or through a library that imports it undeclared
# (model-signing imports OpenSSL). tests/unit/test_extras.py keeps it equal to pyproject.
MODULES: dict[str, tuple[str, ...]] = {
    "gcp": (
        "google.cloud.storage",
        "google.cloud.artifactregistry_v1",
        "google.api_core",
        "google.auth",
        "google.oauth2",
    ),
    "aws": ("boto3", "botocore"),
    "k8s": ("kubernetes",),
    "signing": ("model_signing", "sigstore", "sigstore_models", "OpenSSL", "blake3"),
}


class MissingExtra(ConfigError):
    """An optional library a configured backend or a command needs is not installed."""

    code = "missing_extra"

    def __init__(self, *missing: tuple[str, str, str]) -> None:
        """`missing`: (extra, what needs it, the module not installed), one or more."""
        extras = sorted({extra for extra, _, _ in missing})
        needs = "; ".join(
            f"{why} needs the {e} extra ({m} is not installed)" for e, why, m in missing
        )
        super().__init__(
            f"{needs}: pip install 'modelhooks[{','.join(extras)}]'", extras=",".join(extras)
        )


@cache
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def missing(extra: str) -> str | None:
    """The first module of `extra` that is not installed, or None."""
    return next((m for m in MODULES[extra] if not _installed(m)), None)


def require(extra: str, why: str) -> None:
    """Raise MissingExtra when a module of `extra` is not installed (`why`: what needs it,
    e.g. the setting that selects the backend). Looks modules up without importing them."""
    module = missing(extra)
    if module is not None:
        raise MissingExtra((extra, why, module))


@contextmanager
def importing(extra: str, why: str) -> Iterator[None]:
    """Around a lazy import of an optional library: a module of `extra` that is missing
    (the library itself, or one it imports) raises MissingExtra instead.

    >>> with importing("gcp", "gs:// URIs"):  # doctest: +SKIP
    ...     from google.cloud import storage
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        name = exc.name or ""
        if not any(_within(name, m) for m in MODULES[extra]):
            raise  # not this extra's: a broken install, shown as it is
        raise MissingExtra((extra, why, name)) from None


def _within(name: str, module: str) -> bool:
    """Whether a missing `name` is `module`, a package it lies in, or one of its parts."""
    return name == module or module.startswith(f"{name}.") or name.startswith(f"{module}.")
