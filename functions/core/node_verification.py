"""`verifyOn: node`: an image volume's model re-hashed on the node by an init container
(sigstore/model-validation-operator's approach), for clusters that want the node to verify
what it mounted (pure).

The mutating webhook adds ONE init container per image volume a `verifyOn: node` policy covers,
`modelhooks-verify-<volume>` (replacing one of that name that is not the one it needs): the
verifier image (admission.verifier_image) running `modelhooks verify` on the volume mounted
read-only, with what the covering policies trust inline (MODELHOOKS_VERIFY_TRUST: their
keys, certificate chains and keyless identities, one group per policy; the model is accepted
when EVERY covering policy's group verifies it, within a group any of its keys, chains or
identities; with identities, the admission function's Sigstore trusted root when it is a
private instance's, so the node verifies against the same one without reaching it). The volume's root is the model, signed as a directory (`modelhooks sign DIR`: `model.sig` inside it). A model that does not verify keeps
the Pod in Init, the reason in its status (FallbackToLogsOnError). The validating webhook does
not check such a reference's signature at admission, but requires exactly that container: the
mutating webhook is failurePolicy Ignore, and a Pod it did not reach must not run unverified.

>>> p = Policy.from_resource({"metadata": {"name": "p"}, "spec": {"verifyOn": "node",
...     "keys": [{"name": "k", "pem": "PEM"}]}})
>>> pod = {"spec": {"volumes": [{"name": "m", "image": {"reference": "r.io/m:v1"}}]}}
>>> [op["value"][0]["name"] for op in inject("Pod", pod, [p], {}, "r.io/modelhooks:1")]
['modelhooks-verify-m']
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from modelhooks.core.verification import Policy
from modelhooks.core.workloads import POD_SPECS, image_uri

__all__ = ["MOUNT", "PREFIX", "TRUST_ENV", "container_name", "inject", "missing", "trust"]

PREFIX = "modelhooks-verify-"
MOUNT = "/modelhooks/model"  # where the init container mounts the volume
TRUST_ENV = "MODELHOOKS_VERIFY_TRUST"  # what `modelhooks verify` trusts (--trust-json)
# admitted at the `restricted` Pod Security level (not readOnlyRootFilesystem: it writes the
# trust's PEM files to /tmp)
_RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


# what the apiserver may set on a container it was given: its defaults (imagePullPolicy,
# terminationMessagePath, resources {}), LimitRanger's resources, resizePolicy
_FILLED = frozenset({"imagePullPolicy", "terminationMessagePath", "resources", "resizePolicy"})
_SECRETS = "/var/run/secrets/"  # where credential injectors mount, read-only

Root = Callable[[], str]  # the private Sigstore trusted root (JSON), "" for the public-good one


def _public() -> str:
    return ""


# frozen msgspec Structs, not dataclasses: making a Struct class costs ~2 % of a dataclass's
class _Volume(msgspec.Struct, frozen=True):
    name: str
    uri: str


def container_name(volume: str) -> str:
    """The init container verifying `volume` (a DNS label: at most 63 characters)."""
    name = PREFIX + volume
    if len(name) <= 63:
        return name
    return f"{name[:54]}-{hashlib.sha256(volume.encode()).hexdigest()[:8]}"


def trust(policies: Sequence[Policy], root: Root = _public) -> dict[str, Any]:
    """What `policies` trust, as `modelhooks verify --trust-json` reads it. One policy: its
    spec's trust (keys, certificateChains, identities, each key and chain named after it),
    any of which may have signed the model. Several: `{"allOf": [each one's, named]}`, EVERY
    one of which must accept the signature (a workload's author chooses the labels that make
    a loose policy cover it beside a strict one). One policy's is written as it always was,
    so an init container already there stays the one needed and a verifier image from before
    `allOf` still runs it. With identities, `trustedRoot` beside them when `root()` names a
    private instance's."""
    ordered = sorted(policies, key=lambda p: (p.namespace, p.name))
    groups = [_trust(policy) for policy in ordered]
    found: dict[str, Any] = (
        groups[0]
        if len(groups) == 1
        else {"allOf": [{"name": p.shown, **g} for p, g in zip(ordered, groups, strict=True)]}
    )
    if any(p.identities for p in ordered) and (text := root()):
        found["trustedRoot"] = json.loads(text)
    return found


def _trust(policy: Policy) -> dict[str, Any]:
    """One policy's trust, as its spec says it (what it lacks left out)."""
    identities = [
        {k: v for k, v in fields.items() if v}
        for fields in (
            {
                "issuer": i.issuer,
                "issuerRegExp": i.issuer_regexp,
                "subject": i.subject,
                "subjectRegExp": i.subject_regexp,
            }
            for i in policy.identities
        )
    ]
    found = {
        "keys": [{"name": f"{policy.name}/{n}", "pem": pem} for n, pem in policy.keys],
        "certificateChains": [
            {"name": f"{policy.name}/{n}", "pem": pem} for n, pem in policy.chains
        ],
        "identities": identities,
    }
    return {k: v for k, v in found.items() if v}


def _container(
    volume: _Volume, policies: Sequence[Policy], image: str, root: Root
) -> dict[str, Any]:
    value = json.dumps(trust(policies, root), sort_keys=True, separators=(",", ":"))
    return {
        "name": container_name(volume.name),
        "image": image,
        "command": ["modelhooks", "verify", MOUNT, "--quiet"],
        "env": [{"name": TRUST_ENV, "value": value}],
        "volumeMounts": [{"name": volume.name, "mountPath": MOUNT, "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": _RESTRICTED,
    }


def _differ(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """The fields in which `found` is not the container `expected`: every field set exactly,
    and no other but those the apiserver fills in (its defaults, LimitRanger's resources):
    `restartPolicy: Always` would make it a sidecar the containers do not wait for, `args`
    or `envFrom` would change what it runs. More volumeMounts are allowed only read-only
    under /var/run/secrets/ (the ServiceAccount admission plugin's token, a cloud identity
    webhook's): one elsewhere could lay another `modelhooks` (or Python, or a trusted root)
    over the verifier's."""
    differ = [k for k, v in expected.items() if k != "volumeMounts" and found.get(k) != v]
    differ += sorted(k for k in found if k not in expected and k not in _FILLED)
    mounts = [m for m in found.get("volumeMounts") or () if isinstance(m, Mapping)]
    (ours,) = expected["volumeMounts"]
    others = [m for m in mounts if m != ours]
    if ours not in mounts or not all(map(_secret_mount, others)):
        differ.append("volumeMounts")
    return differ


def _secret_mount(mount: Mapping[str, Any]) -> bool:
    path = mount.get("mountPath")
    if not isinstance(path, str) or mount.get("readOnly") is not True:
        return False
    return posixpath.normpath(path).startswith(_SECRETS)


def _spec(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    node: Any = obj
    for key in POD_SPECS.get(kind, ("",)):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _covered(
    spec: Mapping[str, Any], policies: Sequence[Policy], labels: Mapping[str, str]
) -> list[tuple[_Volume, list[Policy]]]:
    """Each image volume a `verifyOn: node` policy covers, with those policies."""
    found = []
    for volume in spec.get("volumes") or ():
        image = volume.get("image") if isinstance(volume, Mapping) else None
        if not isinstance(image, Mapping) or not isinstance(image.get("reference"), str):
            continue
        uri = image_uri(image["reference"].strip())
        node = [p for p in policies if p.verify_on == "node" and p.covers(labels, uri)]
        if node:
            found.append((_Volume(str(volume.get("name", "")), uri), node))
    return found


def inject(
    kind: str,
    obj: Mapping[str, Any],
    policies: Sequence[Policy],
    labels: Mapping[str, str],
    image: str,
    root: Root = _public,
) -> list[dict[str, Any]]:
    """JSONPatch operations putting the init containers first among the Pod's (the model is
    verified before anything else reads it) when one is missing, is not what its policies
    need (their trust changed since a template got it, or it was written by hand), or runs
    after another that mounts its model; none when each is there as it should be (a
    reinvocation changes nothing, nor does a template that is fine get reordered)."""
    spec = _spec(kind, obj)
    if spec is None:
        return []
    pointer = "/" + "/".join(POD_SPECS[kind]) + "/initContainers"
    existing = list(spec.get("initContainers") or ())
    wanted = [
        (volume.name, _container(volume, node, image, root))
        for volume, node in _covered(spec, policies, labels)
    ]
    if all(_verifies(existing, volume, expected) for volume, expected in wanted):
        return []
    ours = {expected["name"] for _, expected in wanted}
    rest = [c for c in existing if not (isinstance(c, Mapping) and c.get("name") in ours)]
    return [{"op": "add", "path": pointer, "value": [c for _, c in wanted] + rest}]


def _verifies(existing: Sequence[Any], volume: str, expected: Mapping[str, Any]) -> bool:
    """Whether the init containers `existing` verify `volume` as `expected` does: it is
    there, the same, and no init container before it mounts the model."""
    index = _index(existing, expected["name"])
    return (
        index >= 0
        and not _differ(expected, existing[index])
        and not _early(existing, index, volume)
    )


def _index(existing: Sequence[Any], name: str) -> int:
    names = [c.get("name") if isinstance(c, Mapping) else None for c in existing]
    return names.index(name) if name in names else -1


def _early(existing: Sequence[Any], index: int, volume: str) -> str:
    """The first init container before `index` that mounts `volume` (it would read the model,
    or serve it as a sidecar, before it is verified), or ""."""
    for before in existing[:index]:
        mounts = before.get("volumeMounts") if isinstance(before, Mapping) else None
        if any(isinstance(m, Mapping) and m.get("name") == volume for m in mounts or ()):
            return str(before.get("name"))
    return ""


def missing(
    kind: str,
    obj: Mapping[str, Any],
    policies: Sequence[Policy],
    labels: Mapping[str, str],
    image: str,
    root: Root = _public,
) -> tuple[set[str], list[str]]:
    """(the references verified on the node, a denial for each volume whose init container
    is absent, not the one its policies need, or after another mounting the model)."""
    spec = _spec(kind, obj)
    if spec is None:
        return set(), []
    existing = list(spec.get("initContainers") or ())
    uris: set[str] = set()
    denials: list[str] = []
    for volume, node in _covered(spec, policies, labels):
        uris.add(volume.uri)
        expected = _container(volume, node, image, root)
        name = expected["name"]
        which = ", ".join(p.shown for p in node)
        what = f"model {volume.uri} (volume {volume.name}): {which} verifies it on the node"
        index = _index(existing, name)
        if index < 0:
            denials.append(
                f"{what} (verifyOn: node), but the {kind} has no init container {name}: the "
                "mutating webhook did not add it (it is failurePolicy Ignore, or did not know the "
                f"policy yet); create the {kind} again"
            )
            continue
        differ = _differ(expected, existing[index])
        if differ:
            denials.append(
                f"{what} (verifyOn: node), but its init container {name} is not the one the "
                f"policy needs ({', '.join(differ)} differ); remove it and create the {kind} "
                "again (the mutating webhook adds it)"
            )
        elif early := _early(existing, index, volume.name):
            denials.append(
                f"{what} (verifyOn: node), but its init container {name} runs after init "
                f"container {early}, which mounts the model before it is verified; remove "
                f"{name} and create the {kind} again (the mutating webhook puts it first)"
            )
    return uris, denials
