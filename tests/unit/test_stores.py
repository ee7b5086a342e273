"""URIs taken from events: file:// stays inside the local store, hosts are not local."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelhooks.bootstrap import build
from modelhooks.core.errors import Forbidden
from modelhooks.core.settings import load_settings
from modelhooks.core.stores import Stores


def stores(home: Path, **env: str) -> Stores:
    return build(load_settings(env={"MODELHOOKS_HOME": str(home), **env})).deps.stores


def test_file_uris_resolve_inside_the_local_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "models" / "m" / "1").mkdir(parents=True)
    store, bucket, key = stores(tmp_path).resolve(f"{(root / 'models' / 'm' / '1').as_uri()}/")
    assert (bucket, key) == ("models", "m/1/")
    assert store.stat("models", "m/1/absent") is None


@pytest.mark.parametrize("uri", ["file:///etc/", "file:///tmp/x/../../etc/passwd"])
def test_file_uris_outside_the_local_store_are_forbidden(tmp_path: Path, uri: str) -> None:
    with pytest.raises(Forbidden, match="outside the local store"):
        stores(tmp_path).resolve(uri)


@pytest.mark.parametrize(
    "uri",
    [
        "oci://127.0.0.1:5000/m@sha256:00",
        "oci://localhost/m:v1",
        "oci://169.254.169.254/m:v1",
        "oci://metadata.google.internal/m:v1",
        "oci://[::1]:5000/m:v1",
    ],
)
def test_local_and_metadata_hosts_are_refused(tmp_path: Path, uri: str) -> None:
    with pytest.raises(Forbidden):
        stores(tmp_path).check_host(uri)


def test_remote_hosts_pass_and_local_ones_can_be_allowed(tmp_path: Path) -> None:
    stores(tmp_path).check_host("oci://europe-docker.pkg.dev/p/r/m@sha256:00")
    with pytest.raises(Forbidden, match="non-public"):
        stores(tmp_path).check_host("oci://10.0.0.7:5000/m:v1")  # private: not by default
    allowed = stores(tmp_path, MODELHOOKS_STORE_ALLOWED_HOSTS="10.0.0.7:5000")
    allowed.check_host("oci://10.0.0.7:5000/m:v1")  # an in-cluster registry, named
    with pytest.raises(Forbidden):
        allowed.check_host("oci://10.0.0.8:5000/m:v1")
    allowed = stores(tmp_path, MODELHOOKS_STORE_ALLOW_LOCAL_TARGETS="true")
    allowed.check_host("oci://127.0.0.1:5000/m:v1")


@pytest.mark.parametrize(
    "uri",
    [
        "gs://[]/m/",
        "s3://[x]/m/",
        "gs://[::1/m/",
        "gs://b\uff03/m/",
        "gs://models#-ml/models/m/1/",  # a URL parser's bucket "models", and no key
        "s3://b?x/m/",
        "gs://../m/",
        "gs://b\t/m/",
    ],
)
def test_a_uri_whose_bucket_is_no_bucket_name_is_bad_input(uri: str) -> None:
    from modelhooks.core.errors import BadRequest
    from modelhooks.core.stores import split_uri

    with pytest.raises(BadRequest, match="is not a bucket name"):
        split_uri(uri)


def test_an_object_key_is_taken_as_written() -> None:
    """'#', '?' and '%' may be in an object's name: a URL parser cut the key there."""
    from modelhooks.core.stores import split_uri

    assert split_uri("gs://b/models/a#b?c%20/") == ("gs", "b", "models/a#b?c%20/")
    assert split_uri("S3://My_Bucket.x/k") == ("s3", "My_Bucket.x", "k")
