"""A sha512 digest is a digest wherever a reference is read (events.model.is_pullable_digest,
the rule parse_uri validates by): each function asked `startswith("sha256:")`, so a
`repo@sha512:…` Model was resolved as a tag (register: "not there yet" for ever), its pinned
digest was not in use to prune, its status's resolvedDigest not kept by cleanup, and a
transfer named it `repo:sha512:…`."""

from __future__ import annotations

from modelhooks.adapters.oci.distribution import DistributionRegistry
from modelhooks.adapters.transfer.oci import OciEnd
from modelhooks.core.sources import model_source
from modelhooks.events.model import ModelCreated
from modelhooks.handlers.cleanup import _from_source
from modelhooks.handlers.prune import _model_policy

SHA512 = "sha512:" + "b" * 128


def test_a_sha512_reference_pins_its_digest() -> None:
    assert model_source({"oci": {"reference": f"r.example/m@{SHA512}"}}).digest == SHA512
    assert model_source({"oci": {"reference": f"r.example/m:v1@{SHA512}"}}).digest == SHA512
    assert model_source({"oci": {"reference": "r.example/m:v1"}}).digest == ""


def test_prune_keeps_a_models_sha512_digest_and_protects_no_tag_of_that_name() -> None:
    spec = {"source": {"oci": {"reference": f"r.example/m@{SHA512}"}},
            "retention": {"keepVersions": 2}}  # fmt: skip
    found = _model_policy(ModelCreated(name="m", namespace="ml", version="1", spec=spec))
    assert found is not None
    repository, policy, pinned = found
    assert (repository, pinned, policy.protect) == ("oci://r.example/m", {SHA512}, ("^latest$",))


def test_cleanup_targets_a_sha512_resolved_digest() -> None:
    target = _from_source({"oci": {"reference": "r.example/m:v1"}}, {"resolvedDigest": SHA512})
    assert (target.uri, target.digest) == ("oci://r.example/m:v1", SHA512)


def test_a_transfer_names_a_sha512_reference_with_an_at() -> None:
    end = OciEnd(DistributionRegistry("http://r.example"), "m", SHA512, host="r.example")
    assert end.uri == f"oci://r.example/m@{SHA512}"
    assert OciEnd(DistributionRegistry("http://r.example"), "m", "v1", host="r.example").uri == (
        "oci://r.example/m:v1"
    )
