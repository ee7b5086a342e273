"""What a Model's spec.source names, read the same way by register, cleanup and notify."""

from __future__ import annotations

from typing import Any

import pytest

from modelhooks.core.errors import BadRequest
from modelhooks.core.sources import Source, model_source

SHA = "c" * 64


@pytest.mark.parametrize(
    "source, expected",
    [
        ({"oci": {"reference": "r/m:v1"}}, Source("oci://r/m:v1", "oci")),
        ({"oci": {"reference": f"r/m@sha256:{SHA}"}}, Source(f"oci://r/m@sha256:{SHA}", "oci", f"sha256:{SHA}")),
        ({"gcs": {"uri": "gs://b/m/1/"}}, Source("gs://b/m/1/", "gcs")),
        ({"s3": {"uri": "s3://b/m/1/"}}, Source("s3://b/m/1/", "s3")),
        ({"s3": {"uri": "file:///h/store/b/m/1/"}}, Source("file:///h/store/b/m/1/", "local")),
        ({"http": {"url": "https://e.com/m.zip", "sha256": SHA}}, Source("https://e.com/m.zip", "http", f"sha256:{SHA}")),
        ({"http": {"url": "https://e.com/a@b/m.zip", "sha256": SHA}}, Source("https://e.com/a@b/m.zip", "http", f"sha256:{SHA}")),
    ],
)  # fmt: skip
def test_each_kind_of_source(source: dict[str, Any], expected: Source) -> None:
    assert model_source(source) == expected


@pytest.mark.parametrize(
    "source, field",
    [
        (None, "expected an object"),
        ({}, "expected oci.reference"),
        ({"gcs": {"uri": "s3://b/m/"}}, "not a gs:// URI"),
        ({"http": {"url": "http://e.com/m.zip", "sha256": SHA}}, "https:// URL"),
        ({"http": {"url": "https://e.com/m.zip", "sha256": "XYZ"}}, "64 hex digits"),
        ({"http": {"url": "https://e.com/m.zip"}}, "64 hex digits"),
        ({"http": {"url": "https://u:pw@e.com/m.zip", "sha256": SHA}}, "credentials in the URL"),
        ({"http": {"url": "https://u@e.com:8443?x", "sha256": SHA}}, "credentials in the URL"),
    ],
)
def test_anything_else_is_a_bad_request_naming_why(source: Any, field: str) -> None:
    with pytest.raises(BadRequest, match=field):
        model_source(source)
