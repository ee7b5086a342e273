"""Clients that act with the credentials of a Secret (a Model's `spec.source.secretRef`)
instead of the process's: the same stores and registry clients the composition root
builds, under the same address rules, given other credentials.

| source | the Secret's keys |
|---|---|
| `s3` | `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (`AWS_SESSION_TOKEN` optional) |
| `gcs` | `key.json`: a service-account key (JSON) |
| `oci` | `username` and `password`, or `.dockerconfigjson` (its `auths` entry for the host) |

A Secret without the keys its source needs, or with unreadable ones, is a BadRequest that
names the keys expected (never their values). A `file://` source (the local store, and
every scheme with `store.backend=local`) takes no credentials.

>>> stores, oci = clients_for({"username": b"bot", "password": b"pw"}, "oci://r.example/m:v1",
...                           stores=stores, oci=oci, where="Secret ml/creds")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from modelhooks.adapters.object_store.gcs import GcsObjectStore
from modelhooks.adapters.object_store.s3 import S3ObjectStore
from modelhooks.adapters.oci.clients import OciClients
from modelhooks.adapters.oci.distribution import parse_uri
from modelhooks.core.errors import BadRequest
from modelhooks.core.extras import importing
from modelhooks.core.stores import Stores

__all__ = ["clients_for", "gcs_credentials", "oci_auth", "s3_keys"]

Secret = Mapping[str, bytes]
_DOCKER_HUB = {"docker.io", "index.docker.io", "registry-1.docker.io"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def clients_for(
    secret: Secret, uri: str, *, stores: Stores, oci: OciClients, where: str
) -> tuple[Stores, OciClients]:
    """(stores, oci clients) that act on `uri` with the Secret's credentials. `where` names
    the Secret in errors ("Secret ml/creds")."""
    scheme = uri.partition("://")[0]
    if scheme == "oci":
        return stores, oci.with_auth(oci_auth(secret, parse_uri(uri)[0], where))
    if scheme not in ("gs", "s3"):
        return stores, oci
    store = stores.for_scheme(scheme)
    if isinstance(store, S3ObjectStore):
        return stores.replacing(scheme, store.with_credentials(*s3_keys(secret, where))), oci
    if isinstance(store, GcsObjectStore):
        credentials = gcs_credentials(secret, where)
        project = getattr(credentials, "project_id", None)
        return stores.replacing(scheme, store.with_credentials(credentials, project)), oci
    return stores, oci  # the local store: nothing to authenticate to


def s3_keys(secret: Secret, where: str) -> tuple[str, str, str | None]:
    """(access key id, secret access key, session token or None)."""
    if "AWS_ACCESS_KEY_ID" not in secret or "AWS_SECRET_ACCESS_KEY" not in secret:
        raise _missing(
            secret,
            where,
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN optional)",
        )
    token = secret.get("AWS_SESSION_TOKEN")
    return (
        _s3_key(secret, "AWS_ACCESS_KEY_ID", where, longest=128),
        _s3_key(secret, "AWS_SECRET_ACCESS_KEY", where),
        _s3_key(secret, "AWS_SESSION_TOKEN", where) if token else None,
    )


def _s3_key(secret: Secret, key: str, where: str, longest: int = 0) -> str:
    """A key's text, refused (naming the key, never its value) when no S3 service could
    take it: empty, holding a control character (the access key id goes into a header: a
    newline or NUL in it failed every request as if S3 were down, 503 for ever), or an
    access key id longer than AWS's 128 characters (a header too large: the same)."""
    value = _text(secret, key, where)
    why = ""
    if not value:
        why = "is empty"
    elif _CONTROL.search(value):
        why = "holds a control character"
    elif longest and len(value) > longest:
        why = f"is longer than {longest} characters"
    if why:
        raise BadRequest(f"{where}: {key} {why}: not an S3 credential", field=key)
    return value


def gcs_credentials(secret: Secret, where: str) -> Any:
    """google.oauth2 service-account credentials from `key.json`."""
    if "key.json" not in secret:
        raise _missing(secret, where, "key.json (a GCS service-account key)")
    try:
        info = json.loads(secret["key.json"])
    except ValueError:
        raise BadRequest(f"{where}: key.json is not JSON", field="key.json") from None
    with importing("gcp", "a gcs secretRef"):
        from google.oauth2 import service_account
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise BadRequest(f"{where}: key.json is not a service-account key", field="key.json")
    if not isinstance(info.get("private_key", ""), str):  # google-auth's error would show it
        raise BadRequest(f"{where}: key.json's private_key is not a PEM text", field="key.json")
    load: Any = service_account.Credentials.from_service_account_info  # google-auth: untyped
    try:
        return load(info)
    except (ValueError, KeyError, TypeError) as exc:  # missing fields, an unreadable key
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise BadRequest(
            f"{where}: key.json is not a usable service-account key: {reason}", field="key.json"
        ) from None


def oci_auth(secret: Secret, host: str, where: str) -> tuple[str, str]:
    """(username, password) for `host`: the `username`/`password` keys, else the
    `.dockerconfigjson` entry for the host."""
    if "username" in secret and "password" in secret:
        return _text(secret, "username", where), _text(secret, "password", where)
    expected = f"username and password, or .dockerconfigjson with an auths entry for {host}"
    if ".dockerconfigjson" not in secret:
        raise _missing(secret, where, expected)
    try:
        auths = json.loads(secret[".dockerconfigjson"]).get("auths")
    except (ValueError, AttributeError):
        auths = None
    if not isinstance(auths, dict):
        raise BadRequest(
            f"{where}: .dockerconfigjson has no `auths` object", field=".dockerconfigjson"
        )
    entry = next((v for k, v in auths.items() if _same_host(k, host)), None)
    if not isinstance(entry, dict):
        raise BadRequest(f"{where}: expected {expected}", field=".dockerconfigjson")
    user, password = entry.get("username"), entry.get("password")
    if isinstance(entry.get("auth"), str) and not (user and password):
        try:
            user, colon, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user, colon, password = None, "", None
        if not colon:  # a token alone is no user: it was sent, and shown, as the user name
            user = password = None
    if not (isinstance(user, str) and user and isinstance(password, str)):
        raise BadRequest(
            f"{where}: the .dockerconfigjson entry for {host} needs username and password, "
            "or auth (base64 of user:password)",
            field=".dockerconfigjson",
        )
    return user, password


def _same_host(key: str, host: str) -> bool:
    """Whether a docker config `auths` key (`host`, `https://host/v1/`) names `host`."""
    named = key.lower().partition("://")[2] or key.lower()
    named, host = named.split("/", 1)[0], host.lower()
    return named == host or {named, host} <= _DOCKER_HUB


def _text(secret: Secret, key: str, where: str) -> str:
    try:
        return secret[key].decode().rstrip("\r\n")  # `--from-file` keeps a newline
    except UnicodeDecodeError:
        raise BadRequest(f"{where}: {key} is not UTF-8 text", field=key) from None


def _missing(secret: Secret, where: str, expected: str) -> BadRequest:
    has = ", ".join(sorted(secret)) or "no keys"
    return BadRequest(f"{where}: expected {expected}; it has {has}", expected=expected)
