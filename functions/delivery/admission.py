"""AdmissionReview v1 over HTTP: the admission function's endpoints.

    POST /admission/validate   the ValidatingWebhookConfiguration's path
    POST /admission/mutate     the MutatingWebhookConfiguration's path (tags → digests)

Every request gets an AdmissionReview answer with status 200, whatever it held: a body
that is not an AdmissionReview, is too big, or names an object that does not parse is
denied with the reason (the apiserver shows it to the user), never a 500 (which the
apiserver would turn into its own, less helpful, failure). Kinds admission does not read
are allowed.

>>> decode(b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",'
...        b' "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE"}}').uid
'u'
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from modelhooks.core.admission import Decision, Review
from modelhooks.core.errors import BadRequest, ModelhooksError
from modelhooks.core.logs import log
from modelhooks.delivery.encoding import Response, json_response

__all__ = ["PATHS", "admission_endpoint", "answer", "decode", "refused"]

PATHS = {"/admission/validate": False, "/admission/mutate": True}  # path → mutating
API_VERSION = "admission.k8s.io/v1"


def decode(body: bytes, *, mutate: bool = False) -> Review:
    """The review in `body`; BadRequest naming what is wrong (its uid, when it has one, in
    the error's details)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the body is not JSON: {e}") from None
    except RecursionError:  # json's parser recurses per level: '[' * 10**5 is 3 MiB deep
        raise BadRequest("the body is JSON nested too deeply to read") from None
    if not isinstance(doc, dict):
        raise BadRequest("the body is not an AdmissionReview object")
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    uid = uid if isinstance(uid, str) else ""
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "AdmissionReview":
        raise BadRequest(f"not an {API_VERSION} AdmissionReview", uid=uid)
    if not isinstance(request, dict) or not uid:
        raise BadRequest("the AdmissionReview has no request.uid", uid=uid)
    kind = request.get("kind")
    obj = request.get("object")
    fields = {
        "kind": kind.get("kind") if isinstance(kind, dict) else None,
        "operation": request.get("operation"),
        "namespace": request.get("namespace", ""),
        "name": request.get("name", ""),
    }
    for name, value in fields.items():
        if not isinstance(value, str):
            raise BadRequest(f"request.{name} is not a string", uid=uid)
    old = request.get("oldObject")
    for name, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise BadRequest(f"request.{name} is not an object", uid=uid)
    return Review(uid=uid, object=obj or {}, mutate=mutate, old_object=old or {}, **fields)


def answer(uid: str, decision: Decision) -> Response:
    """The AdmissionReview response carrying `decision`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.patch:
        patch = json.dumps(list(decision.patch), separators=(",", ":")).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode()
    return json_response(
        200, {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    )


def refused(error: ModelhooksError) -> Response:
    """A review refused before it could be read (too big, not in time): denied, with why."""
    return answer("", Decision.deny(error.message, code=400))


def admission_endpoint(review: Callable[..., Any]) -> Callable[..., Response]:
    """The handler of both paths: (method, path, headers, body) → an AdmissionReview.
    `review` is the bound admission handler: Review → Decision."""

    def handle(method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        mutate = PATHS.get(path.rstrip("/"), path.rstrip("/").endswith("/mutate"))
        if method != "POST":
            return answer("", Decision.deny(f"{method} {path}: POST an AdmissionReview", code=400))
        try:
            request = decode(body, mutate=mutate)
        except BadRequest as e:
            return answer(str(e.details.get("uid", "")), Decision.deny(e.message, code=400))
        try:
            decision = review(request)
            if not isinstance(decision, Decision):
                raise TypeError(f"the admission handler answered {type(decision).__name__}")
        except ModelhooksError as e:  # a handler bug or a backend error: fail closed, say why
            decision = Decision.deny(e.message, code=503)
        except Exception as e:  # never a 500: the apiserver would only say "failed calling"
            log(logging.ERROR, "admission failed", uid=request.uid, error=repr(e), exc_info=e)
            decision = Decision.deny(
                f"admission failed ({type(e).__name__}); see its logs", code=500
            )
        log(
            logging.INFO if not decision.allowed or decision.warnings else logging.DEBUG,
            "admission",
            uid=request.uid,
            kind=request.kind,
            namespace=request.namespace,
            name=request.name,
            mutate=mutate,
            allowed=decision.allowed,
            message=decision.message,
            warnings=list(decision.warnings),
        )
        return answer(request.uid, decision)

    return handle
