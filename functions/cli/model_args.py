"""What `modelhooks sign` and `modelhooks verify` share: the model's location (a local
directory, gs://, s3:// or oci://, hashed where it lies, no local copy), hashing options and
a progress bar.

    modelhooks sign ./bert --key key.pem
    modelhooks sign gs://models/bert/1 --key leaf.key --certificate leaf.crt --certificate-chain ca.crt
    modelhooks sign s3://models/bert/1 --identity-token /var/run/secrets/sigstore/token
    modelhooks verify ./bert --public-key key.pub
    modelhooks verify s3://models/bert/1 --identity me@example.com --issuer https://accounts.example.com
    modelhooks sign oci://127.0.0.1:5000/models/bert:v1 --key key.pem   (bundle pushed as a referrer)

Exit status: 0 signed / verified, 1 verification failed, 2 a bad argument or model, 3 the
store did not answer, 4 signed already with other content (sign --replace), 130 interrupted.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from modelhooks.adapters.signing.model import Location
from modelhooks.adapters.signing.streaming import HashOptions
from modelhooks.cli import argtypes, progress
from modelhooks.core.errors import BadRequest
from modelhooks.core.ports import ObjectStore

__all__ = [
    "Bar",
    "add_model_arguments",
    "hash_options",
    "model_store",
    "print_signed",
    "signature_location",
]


class Bar(progress.Bar):
    """A tqdm progress bar on stderr, fed from the hashing threads."""

    def so_far(self) -> str:
        """What was hashed, e.g. `hashing: 1.2GiB of 40.0GiB`."""
        from tqdm import tqdm

        if self._bar is None:
            return f"{self._label}: listing the model"
        done, total = (tqdm.format_sizeof(n, "B", 1024) for n in (self._bar.n, self._bar.total))
        return f"{self._label}: {done} of {total}"


def model_store(uri: str, allow_symlinks: bool) -> tuple[ObjectStore, str, str, Path | None]:
    """(store, bucket, prefix, local directory or None) for a model URI or path."""
    from modelhooks.adapters.signing.local import local_model
    from modelhooks.bootstrap import object_store
    from modelhooks.core.settings import load_settings

    scheme = uri.partition("://")[0] if "://" in uri else ""
    if scheme not in ("", "gs", "s3", "file"):
        raise BadRequest(
            f"{uri}: a model is a local directory, gs://bucket/prefix, s3://bucket/prefix or "
            "oci://host/repository[:tag|@digest]"
        )
    if uri.startswith("gs://") or uri.startswith("s3://"):
        bucket, _, prefix = uri[5:].partition("/")
        if not bucket:
            raise BadRequest(f"{uri} names no bucket")
        return object_store(uri[:2], load_settings()), bucket, prefix, None
    path = Path(uri.removeprefix("file://"))
    return (*local_model(path, allow_symlinks=allow_symlinks), path.absolute())


def signature_location(value: str | None, local: Path | None) -> tuple[str | None, Location | None]:
    """--signature: a name inside the model (no "/"; returned as the signature name), or a
    location: a gs:// / s3:// object or a local file (inside a local model: a name again)."""
    from modelhooks.adapters.object_store.local import LocalObjectStore
    from modelhooks.adapters.signing.model import signature_key

    if value is None:
        return None, None
    if value.startswith(("gs://", "s3://")):
        base, _, name = value.rpartition("/")
        store, bucket, prefix, _ = model_store(base, allow_symlinks=False)
        return None, Location(store, bucket, signature_key(prefix, name))
    if "/" not in value:
        return value, None
    path = Path(value).absolute()
    if local is not None and path.is_relative_to(local.absolute()):
        return path.relative_to(local.absolute()).as_posix(), None
    return None, Location(LocalObjectStore(path.parent.parent), path.parent.name, path.name)


def hash_options(args: argparse.Namespace, signature_name: str | None) -> HashOptions:
    """The flags, else the settings the functions sign with (signing.hash, .shard_size,
    .signature_name, layout.marker): a model the `sign` function signed under its own
    marker or signature name is verified by hand with the same settings, no flags."""
    from modelhooks.core.settings import load_settings

    settings = load_settings()
    shard_size = settings.signing.shard_size if args.shard_size is None else args.shard_size
    return HashOptions(
        hash_type=args.hash or settings.signing.hash,
        method="shards" if shard_size else "files",
        shard_size=shard_size or 1_000_000_000,
        allow_symlinks=args.allow_symlinks,
        signature_name=signature_name or settings.signing.signature_name,
        ready_marker=args.ready_marker or settings.layout.marker,
        ignore_paths=tuple(args.ignore or ()),
    )


def print_signed(signed: Any) -> None:
    print(f"signer: {signed.signer}")
    print(f"root digest: sha256:{signed.root_digest}")
    print(f"signature: {signed.bucket}/{signed.key}")
    print(f"verdict: {'signed' if signed.created else 'already signed (unchanged)'}")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "uri",
        help="the model: a local directory, gs://bucket/prefix, s3://bucket/prefix, "
        "or oci://host/repository[:tag|@digest] (signature pushed as a referrer)",
    )
    p.add_argument(
        "--signature",
        metavar="PATH",
        help="where the signature is: a name inside the model (default: signing.signature_name"
        ", model.sig), a local file, or a gs:// / s3:// object",
    )
    p.add_argument("--hash", choices=["sha256", "blake3"], help="default: signing.hash (sha256)")
    p.add_argument(
        "--shard-size",
        type=argtypes.count,
        metavar="BYTES",
        help="hash files in shards of this size (model_signing's shard mode; sign only; "
        "default: signing.shard_size, 0: one digest per file)",
    )
    p.add_argument("--ignore", action="append", metavar="PATH", help="a path to leave out")
    p.add_argument(
        "--ready-marker",
        metavar="NAME",
        help="always left out (default: layout.marker, _SUCCESS)",
    )
    p.add_argument("--allow-symlinks", action="store_true", help="follow symbolic links (local)")
    p.add_argument("--trust-config", type=Path, metavar="JSON", help="Sigstore ClientTrustConfig")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
