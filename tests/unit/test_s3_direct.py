"""The direct S3 reads sign a request exactly as botocore's S3SigV4Auth would (the same
canonical request, hence the same signature), whatever the key, the addressing style and
whether there is a session token; their listings read S3's XML as botocore parses it."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest

from modelhooks.adapters.object_store.s3_direct import _Bucket, _host, _listing, signed_headers

pytest.importorskip("botocore")

STAMP = "20261127T140321Z"
KEY = "dir/a b+c%d/ü~e=f&g?h#i//j.bin"


def _botocore_signature(url: str, headers: dict[str, str], token: str | None) -> str:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials

    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    request = AWSRequest("GET", url, headers=headers)
    request.context["timestamp"] = STAMP
    # payloads signed over https too: the empty body's hash, as over http (S3 takes both)
    request.context["client_config"] = Config(s3={"payload_signing_enabled": True})
    auth = S3SigV4Auth(credentials, "s3", "eu-west-3")
    auth._modify_request_before_signing(request)
    canonical = auth.canonical_request(request)
    return str(auth.signature(auth.string_to_sign(request, canonical), request))


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzE//token+with/slashes=="])
@pytest.mark.parametrize(
    ("bucket_url", "query", "extra"),
    [
        ("http://127.0.0.1:9000/models", "", {"range": "bytes=0-1048575"}),  # an object
        ("https://models.s3.eu-west-3.amazonaws.com", "", {"range": "bytes=5-9"}),
        ("https://s3.eu-west-3.amazonaws.com:443/models", "", {"range": "bytes=0-0"}),
        (  # a listing's second page
            "http://[::1]:9000/models",
            "continuation-token=1%2Fab%3D%3D&encoding-type=url&list-type=2&prefix=dir%2Fa%20b",
            {},
        ),
    ],
)
def test_signature_is_botocores(
    token: str | None, bucket_url: str, query: str, extra: dict[str, str]
) -> None:
    from botocore.credentials import Credentials

    parts = urlsplit(bucket_url)
    at = _Bucket(
        f"{parts.scheme}://{parts.netloc}", parts.path, _host(bucket_url), "eu-west-3", "s3"
    )
    path = f"{at.path}/{quote(KEY, safe='/~')}" if not query else at.path or "/"
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    ours = signed_headers(credentials.get_frozen_credentials(), at, path, query, extra, STAMP)

    url = f"{at.root}{path}" + (f"?{query}" if query else "")
    wanted = _botocore_signature(url, {k.title(): v for k, v in extra.items()}, token)
    assert ours["authorization"].endswith(f", Signature={wanted}")
    assert ours["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{STAMP[:8]}/eu-west-3/s3/aws4_request, "
    )
    assert ours["x-amz-date"] == STAMP
    assert ours.get("x-amz-security-token") == token
    assert ":443" not in ours["host"]  # the default port is not part of Host, as botocore


def test_listing_is_read_as_botocore_reads_it() -> None:
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b"<Name>models</Name><Prefix>m%2F</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
        b"<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
        b"<Contents><Key>m%2Fa+b%2B%C3%BC</Key><Size>10</Size>"
        b"<ETag>&quot;9d1d&quot;</ETag></Contents>"
        b"<Contents><Key>m%2Fz</Key><Size>0</Size><ETag>&quot;d41d-2&quot;</ETag></Contents>"
        b"<NextContinuationToken>1/ab==</NextContinuationToken></ListBucketResult>"
    )
    page = _listing(body)
    assert page == {
        "Contents": [
            {"Key": "m/a b+ü", "Size": 10, "ETag": '"9d1d"'},
            {"Key": "m/z", "Size": 0, "ETag": '"d41d-2"'},
        ],
        "IsTruncated": True,
        "NextContinuationToken": "1/ab==",
    }
    last = body.replace(b"<IsTruncated>true", b"<IsTruncated>false").replace(
        b"<NextContinuationToken>1/ab==</NextContinuationToken>", b""
    )
    assert _listing(last)["IsTruncated"] is False
    with pytest.raises(ValueError, match="not a listing"):
        _listing(b"<Error><Code>AccessDenied</Code></Error>")
