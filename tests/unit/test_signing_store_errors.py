"""SDK errors of the GCS and S3 adapters map onto the modelhooks error tree."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from google.api_core import exceptions as gexc

from modelhooks.adapters.object_store.gcs import gcs_error
from modelhooks.adapters.object_store.s3 import s3_error
from modelhooks.core.errors import (
    Conflict,
    CredentialsRefused,
    Forbidden,
    ModelhooksError,
    NotFound,
    Throttled,
    Unavailable,
)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (gexc.NotFound("x"), NotFound),
        (gexc.PreconditionFailed("x"), Conflict),
        (gexc.Conflict("x"), Conflict),
        (gexc.TooManyRequests("x"), Throttled),
        (gexc.Unauthorized("x"), CredentialsRefused),
        (gexc.Forbidden("x"), Forbidden),
        (gexc.ServiceUnavailable("x"), Unavailable),
        (ConnectionError("reset"), Unavailable),
    ],
)
def test_gcs(exc: Exception, expected: type[ModelhooksError]) -> None:
    err = gcs_error(exc, "models", "bert/1/model.sig")
    assert type(err) is expected and err.details["bucket"] == "models"


def client_error(code: str, status: int) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (client_error("NoSuchKey", 404), NotFound),
        (client_error("404", 404), NotFound),
        (client_error("PreconditionFailed", 412), Conflict),
        (client_error("ConditionalRequestConflict", 409), Conflict),
        (client_error("SlowDown", 503), Throttled),
        (client_error("AccessDenied", 403), Forbidden),
        (client_error("InvalidAccessKeyId", 403), CredentialsRefused),
        (client_error("InternalError", 500), Unavailable),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), Unavailable),
    ],
)
def test_s3(exc: Exception, expected: type[ModelhooksError]) -> None:
    err = s3_error(exc, "models", "bert/1/model.sig")
    assert type(err) is expected and err.details["key"] == "bert/1/model.sig"
