"""The deployment definitions agree with the code: infra/ (Knative, CRDs, RBAC) and
terraform/gcp. Fast, no servers: what a cluster or `terraform apply` would only reveal late
(a Trigger to a missing Service, an env var no setting reads, a function without RBAC or a
dead-letter topic) fails here. The CRDs' server-side behaviour is in
tests/integration/test_crds.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelhooks import main as targets
from modelhooks.adapters.signing.config import SigningConfig
from modelhooks.adapters.transfer.config import OPTIONS as TRANSFER_OPTIONS
from modelhooks.cli import build_parser
from modelhooks.cli.replay import to_events
from modelhooks.core.errors import ConfigError
from modelhooks.core.settings import describe, load_settings
from modelhooks.delivery.router import FUNCTION_LABEL, load_triggers
from modelhooks.handlers import NAMES, load

ROOT = Path(__file__).resolve().parents[2]
INFRA, KNATIVE, RBAC = ROOT / "infra", ROOT / "infra" / "knative", ROOT / "infra" / "k8s" / "rbac"
TERRAFORM = ROOT / "terraform" / "gcp"
# the settings' variables, and `modelhooks transfer`'s own table (the transfer function's)
SETTINGS_ENV = {spec.env for spec in describe()} | {o.env for o in TRANSFER_OPTIONS}
# set by Knative itself (PORT, K_*) or injected by the SinkBinding (K_SINK): never by hand
PLATFORM_ENV = {"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION", "K_SINK"}
BROKER = {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "modelhooks"}
DEAD_LETTER = "modelhooks-dead-letter"
SIGNING_KEY_SECRET = "modelhooks-signing-key"


def _load(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} holds no document"
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: a document is not a mapping"
        assert doc.get("apiVersion") and doc.get("kind"), f"{path}: apiVersion/kind missing"
        assert doc.get("metadata", {}).get("name"), f"{path}: a {doc['kind']} has no name"
    return docs


def _manifests(directory: Path) -> list[Path]:
    """The Kubernetes manifests under `directory` (kustomization.yaml is not one)."""
    return sorted(p for p in directory.rglob("*.yaml") if p.name != "kustomization.yaml")


def _docs(directory: Path) -> list[dict[str, Any]]:
    return [d for path in _manifests(directory) for d in _load(path)]


def _kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.fixture(scope="module")
def knative() -> list[dict[str, Any]]:
    return _docs(KNATIVE)


@pytest.fixture(scope="module")
def rbac() -> list[dict[str, Any]]:
    return _docs(RBAC)


@pytest.fixture(scope="module")
def services(knative: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: doc
        for name, doc in _kind(knative, "Service").items()
        if doc["apiVersion"] == "serving.knative.dev/v1"
    }


def _containers(service: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = service["spec"]["template"]["spec"]["containers"]
    return containers


def _ref(destination: dict[str, Any]) -> dict[str, Any]:
    ref: dict[str, Any] = destination["ref"]
    return ref


# --- every file ------------------------------------------------------------------------


@pytest.mark.parametrize("path", _manifests(INFRA), ids=lambda p: str(p.relative_to(INFRA)))
def test_every_yaml_parses_into_named_objects(path: Path) -> None:
    _load(path)


@pytest.mark.parametrize("plain", [False, True], ids=["knative", "kubernetes"])
def test_names_are_unique_per_kind(plain: bool) -> None:
    """In each install: the Knative one, and the one without Knative (infra/kubernetes)."""
    seen: set[tuple[str, str, str]] = set()
    for path in _manifests(INFRA):
        if path.is_relative_to(INFRA / "kubernetes") != plain and not path.is_relative_to(
            INFRA / "k8s"
        ):
            continue
        for doc in _load(path):
            key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
            assert key not in seen, f"{key} is defined twice"
            seen.add(key)


# --- Knative: triggers, services, broker, sources ----------------------------------------


def test_function_triggers_reach_the_service_of_a_catalog_function(
    knative: list[dict[str, Any]], services: dict[str, dict[str, Any]]
) -> None:
    triggers = _kind(knative, "Trigger")
    function_triggers = [t for t in triggers.values() if FUNCTION_LABEL in t["metadata"]["labels"]]
    assert function_triggers
    for trigger in function_triggers:
        function = trigger["metadata"]["labels"][FUNCTION_LABEL]
        assert function in NAMES, f"{trigger['metadata']['name']}: no function {function!r}"
        ref = _ref(trigger["spec"]["subscriber"])
        assert ref == {
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "name": f"modelhooks-{function}",
        }
        assert ref["name"] in services
        assert services[ref["name"]]["metadata"]["labels"][FUNCTION_LABEL] == function
    # the router reads the same files: it sees exactly the labelled triggers
    assert {t.name for t in load_triggers(KNATIVE)} == {
        t["metadata"]["name"] for t in function_triggers
    }


def test_every_trigger_names_its_function(knative: list[dict[str, Any]]) -> None:
    for trigger in _kind(knative, "Trigger").values():
        assert trigger["metadata"]["labels"].get(FUNCTION_LABEL), trigger["metadata"]["name"]


@pytest.mark.parametrize(
    "sample", sorted((ROOT / "events" / "samples").glob("k8s-*.json")), ids=lambda p: p.stem
)
def test_raw_model_events_reach_every_function_their_canonical_form_reaches(
    sample: Path,
) -> None:
    """The ApiServerSource feeds the Broker raw apiserver events: in the cluster they must
    reach the same functions as the canonical events they translate to do in one process."""
    from modelhooks.events.layout import ObjectLayout

    triggers = load_triggers(KNATIVE)
    raw = json.loads(sample.read_text())
    attributes = {k: str(v) for k, v in raw.items() if k not in ("data", "data_base64")}
    in_cluster = {t.function for t in triggers if t.matches(attributes)}
    canonical = [e for e in to_events([(sample.name, raw)], ObjectLayout())]
    assert not [e for e in canonical if isinstance(e, Exception)]
    in_process = {t.function for t in triggers for e in canonical if t.accepts(e)}
    assert in_process <= in_cluster, f"{sample.name}: {in_process - in_cluster} unreachable"
    if raw["type"].endswith(".delete"):
        assert "register" in in_process  # not vacuous: register handles model.deleted


def test_every_trigger_has_the_brokers_delivery_and_dead_letter(
    knative: list[dict[str, Any]], services: dict[str, dict[str, Any]]
) -> None:
    broker = _kind(knative, "Broker")["modelhooks"]
    delivery = broker["spec"]["delivery"]
    assert _ref(delivery["deadLetterSink"])["name"] == DEAD_LETTER
    assert DEAD_LETTER in services
    assert delivery["retry"] >= 1 and delivery["backoffPolicy"] in ("linear", "exponential")
    for trigger in _kind(knative, "Trigger").values():
        assert trigger["spec"]["broker"] == BROKER["name"]
        assert trigger["spec"]["delivery"] == delivery, trigger["metadata"]["name"]


def test_every_catalog_function_has_a_service_that_runs_its_target(
    knative: list[dict[str, Any]], services: dict[str, dict[str, Any]]
) -> None:
    reached = {
        t["metadata"]["labels"].get(FUNCTION_LABEL) for t in _kind(knative, "Trigger").values()
    }
    for name in (n for n in NAMES if load(n).kind == "events"):  # webhooks: infra/k8s/<name>
        service = services.get(f"modelhooks-{name}")
        assert service, f"infra/knative/services.yaml has no Service modelhooks-{name}"
        assert service["metadata"]["labels"][FUNCTION_LABEL] == name
        assert service["metadata"]["labels"]["networking.knative.dev/visibility"] == (
            "cluster-local"
        ), "functions are reached through the Broker only"
        spec = service["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == f"modelhooks-{name}"
        (container,) = _containers(service)
        argv = container["command"] + container.get("args", [])
        assert argv[:3] == ["functions-framework", "--target", name]
        assert callable(getattr(targets, name)), f"modelhooks.main has no target {name!r}"
        assert container["readinessProbe"], f"modelhooks-{name} has no readiness probe"
        assert name in reached, f"no Trigger delivers to {name}"


def test_knative_services_share_one_image(services: dict[str, dict[str, Any]]) -> None:
    images = {c["image"] for s in services.values() for c in _containers(s)}
    assert len(images) == 1, f"one image for every service, got {images}"


def test_register_is_routed_before_sign_in_process() -> None:
    """`modelhooks serve` runs functions in Trigger order: register must have registered the
    version before sign looks it up (in the cluster sign's 503 + redelivery cover it)."""
    from modelhooks.events.model import ArtifactPushed

    triggers = load_triggers(KNATIVE)
    order = [t.function for t in triggers if ArtifactPushed.TYPE in t.attributes.values()]
    assert "register" in order and "sign" in order
    assert max(i for i, f in enumerate(order) if f == "register") < order.index("sign")


def test_sign_reads_its_key_from_the_one_secret_its_rbac_allows(
    services: dict[str, dict[str, Any]], rbac: list[dict[str, Any]]
) -> None:
    service = services["modelhooks-sign"]
    spec = service["spec"]["template"]["spec"]
    (container,) = _containers(service)
    env = {v["name"]: v for v in container["env"]}
    key_path = Path(env["MODELHOOKS_SIGNING_KEY"]["value"])
    # the key file lies in a read-only mount of the Secret, under the item's path
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if key_path.is_relative_to(m["mountPath"])]
    assert mount.get("readOnly") is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == SIGNING_KEY_SECRET
    assert secret.get("optional") is not True  # key configured, file missing: fail loudly
    items = {i["path"]: i["key"] for i in secret.get("items", [])}
    relative = str(key_path.relative_to(mount["mountPath"]))
    assert relative in items, f"{key_path} is not an item of the Secret {SIGNING_KEY_SECRET}"
    # a key turns signing on (the enabling rule): the Service is not silently a no-op
    settings = load_settings(env={"MODELHOOKS_SIGNING_KEY": str(key_path)})
    config = SigningConfig.from_settings(settings.signing, ready_marker="_")
    assert config.enabled(env={})[0]
    # RBAC: sign reads that Secret by name, in its namespace, and no other Secret
    rules = _rules_of(rbac, "modelhooks-sign")
    secret_rules = [r for r in rules if "" in r["apiGroups"] and "secrets" in r["resources"]]
    assert secret_rules
    for rule in secret_rules:
        assert rule.get("resourceNames") == [SIGNING_KEY_SECRET], rule
        assert set(rule["verbs"]) <= {"get"}, rule
    cluster_wide = [
        rule
        for binding in rbac
        if binding["kind"] == "ClusterRoleBinding"
        and any(s["name"] == "modelhooks-sign" for s in binding["subjects"])
        for role in rbac
        if role["kind"] == "ClusterRole" and role["metadata"]["name"] == binding["roleRef"]["name"]
        for rule in role["rules"]
    ]
    assert not [r for r in cluster_wide if "secrets" in r["resources"]]


def test_only_sign_gets_the_signing_key(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if name == "modelhooks-sign":
            continue
        assert SIGNING_KEY_SECRET not in json.dumps(service), f"{name} can read the signing key"
        names = {v["name"] for c in _containers(service) for v in c.get("env", [])}
        assert not {n for n in names if n.startswith("MODELHOOKS_SIGNING_")}, name


def _env(
    service: dict[str, Any], configmaps: dict[str, dict[str, Any]]
) -> Iterator[tuple[str, str | None]]:
    """(name, literal value or None when it comes from a Secret/ConfigMap key)."""
    for container in _containers(service):
        for source in container.get("envFrom", []):
            data = configmaps[source["configMapRef"]["name"]].get("data", {})
            yield from ((k, str(v)) for k, v in data.items())
        for var in container.get("env", []):
            yield var["name"], (str(var["value"]) if "value" in var else None)


def test_service_env_vars_are_real_settings_and_valid(
    knative: list[dict[str, Any]], services: dict[str, dict[str, Any]]
) -> None:
    configmaps = _kind(knative, "ConfigMap")
    for name, service in services.items():
        env = list(_env(service, configmaps))
        assert env, f"{name} sets no settings"
        names = [k for k, _ in env]
        unknown = set(names) - SETTINGS_ENV
        assert not unknown, f"{name}: {sorted(unknown)} are not settings variables"
        assert not set(names) & PLATFORM_ENV, f"{name} sets a platform variable"
        literal = {k: v for k, v in env if v is not None}
        try:
            load_settings(env=literal)
        except ConfigError as exc:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{name}: its environment does not start: {exc}")


def test_a_bad_setting_in_a_service_would_be_caught() -> None:
    with pytest.raises(ConfigError, match="MODELHOOKS_STORE_BACKEND"):
        load_settings(env={"MODELHOOKS_STORE_BACKEND": "nfs"})


def test_ingress_gets_k_sink_from_a_sinkbinding_to_the_broker(
    knative: list[dict[str, Any]], services: dict[str, dict[str, Any]], rbac: list[dict[str, Any]]
) -> None:
    ingress = services["modelhooks-ingress"]
    (binding,) = _kind(knative, "SinkBinding").values()
    assert binding["spec"]["subject"] == {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "name": "modelhooks-ingress",
    }
    assert _ref(binding["spec"]["sink"]) == BROKER
    namespace = _kind(rbac, "Namespace")["modelhooks"]
    assert namespace["metadata"]["labels"]["bindings.knative.dev/include"] == "true"
    # public endpoint: its delivery authentication comes from a Secret that must exist
    (container,) = _containers(ingress)
    auth = next(v for v in container["env"] if v["name"] == "MODELHOOKS_INGRESS_AUTH")
    assert auth["valueFrom"]["secretKeyRef"].get("optional") is not True


def test_apiserversource_watches_the_model_crd_into_the_broker(
    knative: list[dict[str, Any]], rbac: list[dict[str, Any]]
) -> None:
    (crd,) = _load(INFRA / "k8s" / "crds" / "model.yaml")
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    (source,) = _kind(knative, "ApiServerSource").values()
    spec = source["spec"]
    assert spec["mode"] == "Resource"
    assert spec["resources"] == [
        {"apiVersion": f"{crd['spec']['group']}/{version['name']}", "kind": "Model"}
    ]
    assert crd["spec"]["names"]["kind"] == "Model"
    assert _ref(spec["sink"]) == BROKER
    account = spec["serviceAccountName"]
    assert account in _kind(rbac, "ServiceAccount")
    rules = _rules_of(rbac, account)
    assert _allows(rules, "modelhooks.dev", "models", {"get", "list", "watch"})


# --- RBAC --------------------------------------------------------------------------------


def _rules_of(rbac: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    roles = {(d["kind"], d["metadata"]["name"]): d for d in rbac if d["kind"].endswith("Role")}
    rules = []
    for binding in (d for d in rbac if d["kind"].endswith("RoleBinding")):
        if any(s["name"] == account for s in binding["subjects"]):
            ref = binding["roleRef"]
            rules.extend(roles[(ref["kind"], ref["name"])]["rules"])
    return rules


def _allows(rules: list[dict[str, Any]], group: str, resource: str, verbs: set[str]) -> bool:
    granted: set[str] = set()
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            granted |= set(rule["verbs"])
    return verbs <= granted


def test_every_service_runs_as_an_account_defined_in_rbac(
    services: dict[str, dict[str, Any]], rbac: list[dict[str, Any]]
) -> None:
    accounts = _kind(rbac, "ServiceAccount")
    for name, service in services.items():
        account = service["spec"]["template"]["spec"]["serviceAccountName"]
        assert account in accounts, f"{name} runs as {account}, not in infra/k8s/rbac"
        assert accounts[account]["metadata"]["namespace"] == "modelhooks"


def test_every_catalog_function_has_its_own_rbac_file(rbac: list[dict[str, Any]]) -> None:
    for name in NAMES:  # its identity; its roles only for what it does in the cluster
        docs = _load(RBAC / f"{name}.yaml")
        accounts = [d for d in docs if d["kind"] == "ServiceAccount"]
        assert [a["metadata"]["name"] for a in accounts] == [f"modelhooks-{name}"], name


def test_bindings_are_complete_and_roles_have_no_wildcards(rbac: list[dict[str, Any]]) -> None:
    roles = {(d["kind"], d["metadata"]["name"]) for d in rbac if d["kind"].endswith("Role")}
    accounts = set(_kind(rbac, "ServiceAccount"))
    for binding in (d for d in rbac if d["kind"].endswith("RoleBinding")):
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"]) in roles, binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["name"] in accounts
    for role in (d for d in rbac if d["kind"].endswith("Role")):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard {field}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


@pytest.mark.parametrize(
    ("account", "allowed", "denied"),
    [
        (
            "modelhooks-register",  # Models reach it inside events: no cluster rights
            [],
            [
                ("modelhooks.dev", "models", {"get"}),
                ("modelhooks.dev", "models", {"delete"}),
                ("modelhooks.dev", "models/status", {"patch"}),
                ("", "secrets", {"get"}),
            ],
        ),
        (
            "modelhooks-sign",  # its key Secret only (the test above)
            [],
            [
                ("modelhooks.dev", "models", {"get"}),
                ("modelhooks.dev", "models/status", {"patch"}),
                ("modelhooks.dev", "models", {"delete"}),
            ],
        ),
        (
            "modelhooks-notify",
            [
                ("events.k8s.io", "events", {"create"}),
                ("modelhooks.dev", "models", {"get", "list", "patch"}),  # patch: the finalizer
                ("modelhooks.dev", "models/status", {"patch"}),
            ],
            [
                ("modelhooks.dev", "models", {"delete"}),
                ("modelhooks.dev", "models", {"update"}),
                ("", "secrets", {"get"}),
                ("events.k8s.io", "events", {"delete"}),
                # rollout only where a namespace binds modelhooks-notify-rollout (none here)
                ("apps", "deployments", {"patch"}),
                ("serving.kserve.io", "inferenceservices", {"patch"}),
            ],
        ),
        (
            "modelhooks-cleanup",  # notify releases the finalizer; Secrets only where bound
            [],
            [
                ("", "secrets", {"get"}),
                ("modelhooks.dev", "models", {"patch"}),
                ("modelhooks.dev", "models", {"delete"}),
            ],
        ),
        (
            "modelhooks-admission",
            [("modelhooks.dev", "verificationpolicies", {"get", "list", "watch"})],
            [("modelhooks.dev", "models", {"get"}), ("", "secrets", {"get"})],
        ),
    ],
)
def test_least_privilege(
    rbac: list[dict[str, Any]],
    account: str,
    allowed: list[tuple[str, str, set[str]]],
    denied: list[tuple[str, str, set[str]]],
) -> None:
    rules = _rules_of(rbac, account)
    for group, resource, verbs in allowed:
        assert _allows(rules, group, resource, verbs), (account, resource, verbs)
    for group, resource, verbs in denied:
        assert not _allows(rules, group, resource, verbs), (account, resource, verbs)


def test_cleanup_reads_secrets_only_in_namespaces_that_bind_its_role(
    rbac: list[dict[str, Any]],
) -> None:
    from modelhooks.adapters.kubernetes.secrets import GRANT

    roles = {d["metadata"]["name"]: d for d in rbac if d["kind"] == "ClusterRole"}
    assert roles[GRANT]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    ]  # the role the 403 names: get, no list or watch (a namespace's Secrets unseen)
    bound = [d for d in rbac if d["kind"].endswith("Binding") and d["roleRef"]["name"] == GRANT]
    assert not bound, "opt-in per namespace: never bound by modelhooks itself"
    text = (RBAC / "cleanup.yaml").read_text()
    example = yaml.safe_load("\n".join(
        line.removeprefix("#   ") for line in text.splitlines() if line.startswith("#   ")
    ))  # fmt: skip
    assert example["kind"] == "RoleBinding" and example["roleRef"]["name"] == GRANT
    assert example["subjects"] == [
        {"kind": "ServiceAccount", "name": "modelhooks-cleanup", "namespace": "modelhooks"}
    ]


# --- the dead-letter sink ----------------------------------------------------------------


def test_dead_letter_service_runs_the_project_command(
    services: dict[str, dict[str, Any]], knative: list[dict[str, Any]]
) -> None:
    service = services[DEAD_LETTER]
    (container,) = _containers(service)
    assert container["command"] == ["modelhooks", "dead-letter"]
    assert not _kind(knative, "ConfigMap").get(DEAD_LETTER), "no program inside a ConfigMap"
    volumes = {v["name"]: v for v in service["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    home = next(v["value"] for v in container["env"] if v["name"] == "MODELHOOKS_HOME")
    assert "persistentVolumeClaim" in volumes[mounts[home]]
    args = build_parser().parse_args(container["command"][1:])
    assert args.command == "dead-letter"


# --- terraform/gcp -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def terraform() -> dict[str, Any]:
    """Every block of terraform/gcp/*.tf, merged: {"resource": {type: {name: body}}, …}."""
    import hcl2  # the dev extra installs python-hcl2: never a silent skip

    options = hcl2.SerializationOptions(
        with_comments=False, explicit_blocks=False, strip_string_quotes=True
    )
    merged: dict[str, Any] = {}
    for path in sorted(TERRAFORM.glob("*.tf")):
        with path.open() as f:
            doc = hcl2.load(f, serialization_options=options)
        for kind, blocks in doc.items():
            for block in blocks:
                if kind in ("resource", "data"):
                    for rtype, named in block.items():
                        merged.setdefault(kind, {}).setdefault(rtype, {}).update(named)
                elif kind == "moved":  # unnamed blocks: keep every one
                    merged.setdefault(kind, []).append(block)
                else:
                    merged.setdefault(kind, {}).update(block)
    return merged


def _resource(tf: dict[str, Any], rtype: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = tf["resource"].get(rtype, {}).get(name) or {}
    assert body, f"terraform/gcp has no {rtype}.{name}"
    return body


def test_terraform_pins_the_google_provider(terraform: dict[str, Any]) -> None:
    (providers,) = terraform["terraform"]["required_providers"]
    assert providers["google"] == {"source": "hashicorp/google", "version": "~> 6.0"}
    assert providers["archive"] == {"source": "hashicorp/archive", "version": "~> 2.4"}


def test_terraform_variables_are_documented(terraform: dict[str, Any]) -> None:
    for name, variable in terraform["variable"].items():
        assert variable.get("description"), f"variable {name} has no description"
    for name, output in terraform["output"].items():
        assert output.get("description"), f"output {name} has no description"


def test_every_catalog_function_has_a_function_account_and_dead_letter_topic(
    terraform: dict[str, Any],
) -> None:
    functions = terraform["variable"]["functions"]["default"]
    assert set(functions) == set(NAMES), "var.functions must list exactly the functions"
    per_function = {
        ("google_cloudfunctions2_function", "function"),
        ("google_service_account", "function"),
        ("google_pubsub_topic", "dead_letter"),
        ("google_pubsub_subscription", "dead_letter"),
    }
    for rtype, name in per_function:
        assert _resource(terraform, rtype, name)["for_each"] == "${var.functions}", (rtype, name)
    function = _resource(terraform, "google_cloudfunctions2_function", "function")
    (build,) = function["build_config"]
    assert build["runtime"] == "python311"
    assert build["entry_point"] == "${each.key}"  # the functions-framework target
    (service,) = function["service_config"]
    assert service["service_account_email"] == (
        "${google_service_account.function[each.key].email}"
    )
    topic = _resource(terraform, "google_pubsub_topic", "dead_letter")
    assert "${each.key}" in topic["name"]


def test_each_function_deploys_its_own_source_folder(terraform: dict[str, Any]) -> None:
    """The archive of `make sources` for that function: its main.py, requirements.txt
    (with its extras) and the wheel; named by content, so a change redeploys it alone."""
    (archive,) = [terraform["data"]["archive_file"]["source"]]
    assert archive["for_each"] == "${var.functions}"
    assert archive["source_dir"] == "${var.sources_dir}/${each.key}"
    upload = _resource(terraform, "google_storage_bucket_object", "source")
    assert "output_md5" in upload["name"] and "${each.key}" in upload["name"]
    function = _resource(terraform, "google_cloudfunctions2_function", "function")
    (build,) = function["build_config"]
    (source,) = build["source"]
    (storage,) = source["storage_source"]
    assert storage["object"] == "${google_storage_bucket_object.source[each.key].name}"
    default = terraform["variable"]["sources_dir"]["default"]
    assert (TERRAFORM / default).resolve() == (ROOT / "build" / "functions")


def test_terraform_settings_are_real_settings_and_valid(terraform: dict[str, Any]) -> None:
    settings = terraform["variable"]["settings"]["default"]
    assert set(settings) <= SETTINGS_ENV, set(settings) - SETTINGS_ENV
    load_settings(env=settings)
    for name, fn in terraform["variable"]["functions"]["default"].items():
        assert set(fn.get("env", {})) <= SETTINGS_ENV, name
    function = _resource(terraform, "google_cloudfunctions2_function", "function")
    (service,) = function["service_config"]
    assert service["environment_variables"] == (
        "${merge(var.settings, local.registry_env, lookup(local.signing_env, each.key, {}), "
        "each.value.env)}"
    )
    # with registry_url set, the functions get the kubeflow backend: a valid combination
    registry_env = terraform["locals"]["registry_env"]
    pairs = dict(re.findall(r'(MODELHOOKS_\w+) = "?([^",}]+)"?', registry_env))
    assert pairs["MODELHOOKS_REGISTRY_URL"] == "var.registry_url"
    load_settings(env={**settings, **pairs, "MODELHOOKS_REGISTRY_URL": "https://mr.example"})
    secret_settings = re.findall(r"\b(MODELHOOKS_\w+) = var\.", terraform["locals"]["secret_env"])
    assert secret_settings and set(secret_settings) <= SETTINGS_ENV


def test_terraform_gives_transfer_its_model_sync_secrets_and_only_transfer(
    terraform: dict[str, Any],
) -> None:
    """transfer's store credentials: Secret Manager secrets as its MODEL_SYNC_* variables
    (as the registry token is wired), readable by transfer's account only."""
    variable = terraform["variable"]["transfer_secrets"]
    assert variable["default"] == {}
    (validation,) = variable["validation"]
    (pattern,) = re.findall(r'regex\("([^"]+)"', validation["condition"])
    allowed = {o.env for o in TRANSFER_OPTIONS if re.fullmatch(pattern, o.env)}
    assert allowed == {
        f"MODEL_SYNC_{side}_{name}"
        for side in ("SOURCE", "DESTINATION")
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "OCI_USERNAME", "OCI_PASSWORD")
    }, "transfer_secrets accepts names that are not transfer's credential settings"
    # one mechanism: every function's secret variables, transfer's credentials among them
    secret_env = terraform["locals"]["secret_env"]
    assert 'name == "transfer" ? var.transfer_secrets : {}' in secret_env
    function = _resource(terraform, "google_cloudfunctions2_function", "function")
    (service,) = function["service_config"]
    (block,) = [
        d["secret_environment_variables"]
        for d in service["dynamic"]
        if "secret_environment_variables" in d
    ]
    assert block["for_each"] == "${local.secret_env[each.key]}"
    (content,) = block["content"]
    assert (content["key"], content["secret"], content["version"]) == (
        "${secret_environment_variables.key}",
        "${secret_environment_variables.value}",
        "latest",
    )
    reader = _resource(terraform, "google_secret_manager_secret_iam_member", "transfer_secret")
    readers = terraform["locals"]["transfer_secret_readers"]
    assert reader["for_each"] == "${local.transfer_secret_readers}"
    assert "values(var.transfer_secrets)" in readers and "var.functions" in readers
    assert reader["secret_id"] == "${each.key}"
    assert reader["role"] == "roles/secretmanager.secretAccessor"
    assert reader["member"] == '${google_service_account.function["transfer"].member}'
    assert "google_secret_manager_secret_iam_member.transfer_secret" in " ".join(
        function["depends_on"]
    )
    readme = (TERRAFORM / "README.md").read_text()
    assert "| `transfer_secrets` |" in readme


def test_terraform_mounts_the_signing_key_for_sign_only(terraform: dict[str, Any]) -> None:
    assert terraform["variable"]["signing_key_secret"]["default"] == ""
    local = terraform["locals"]
    # MODELHOOKS_SIGNING_KEY (a path) is set only for sign, only when the secret is given
    signing_env = local["signing_env"]
    assert 'if name == "sign" && var.signing_key_secret != ""' in signing_env
    (key_path,) = re.findall(r'MODELHOOKS_SIGNING_KEY = "([^"]+)"', signing_env)
    key_path = key_path.replace("${local.signing_key_dir}", local["signing_key_dir"])
    function = _resource(terraform, "google_cloudfunctions2_function", "function")
    (service,) = function["service_config"]
    dynamic = {kind: block for d in service["dynamic"] for kind, block in d.items()}
    volume = dynamic["secret_volumes"]
    assert volume["for_each"] == (
        "${contains(keys(local.signing_env), each.key) ? [var.signing_key_secret] : []}"
    )
    (content,) = volume["content"]
    assert content["secret"] == "${secret_volumes.value}"
    (version,) = content["versions"]
    mount = content["mount_path"].replace("${local.signing_key_dir}", local["signing_key_dir"])
    assert key_path == f"{mount}/{version['path']}", "MODELHOOKS_SIGNING_KEY is not the file"
    # only sign's account may read the key, and the function waits for that grant
    reader = _resource(terraform, "google_secret_manager_secret_iam_member", "signing_key")
    assert reader["for_each"] == "${local.signing_env}"
    assert reader["secret_id"] == "${var.signing_key_secret}"
    assert reader["role"] == "roles/secretmanager.secretAccessor"
    assert reader["member"] == "${google_service_account.function[each.key].member}"
    depends = " ".join(function["depends_on"])
    assert "google_secret_manager_secret_iam_member.signing_key" in depends


def test_every_settings_variable_named_in_deployments_exists(terraform: dict[str, Any]) -> None:
    """A typo in a variable name is a setting silently left at its default."""
    texts = [p.read_text() for p in _manifests(INFRA)]
    texts += [json.dumps(terraform)]
    named = {m for text in texts for m in re.findall(r"\bMODELHOOKS_[A-Z0-9_]*[A-Z0-9]", text)}
    assert named, "no settings variable found"
    assert named <= SETTINGS_ENV, f"not settings variables: {sorted(named - SETTINGS_ENV)}"


DELIVERED = {"register", "sign"}  # what the models bucket (Eventarc) and gcr (push) reach


def _delivered(terraform: dict[str, Any]) -> set[str]:
    delivered = set(re.findall(r'"(\w+)"', terraform["locals"]["delivered"]))
    assert terraform["locals"]["delivered"].startswith("${toset(")
    return delivered


def test_the_delivered_functions_are_register_and_sign(terraform: dict[str, Any]) -> None:
    assert _delivered(terraform) == DELIVERED
    assert set(terraform["variable"]["functions"]["default"]) >= DELIVERED


@pytest.mark.parametrize("function", sorted(DELIVERED))
def test_gcs_finalize_events_reach_register_and_sign(
    terraform: dict[str, Any], function: str
) -> None:
    assert function in _delivered(terraform)
    trigger = _resource(terraform, "google_eventarc_trigger", "models_finalized")
    assert trigger["for_each"] == "${local.delivered}"
    assert "${each.key}" in trigger["name"]
    criteria = {c["attribute"]: c["value"] for c in trigger["matching_criteria"]}
    assert criteria == {
        "type": "google.cloud.storage.object.v1.finalized",
        "bucket": "${var.models_bucket}",
    }
    (destination,) = trigger["destination"]
    (run,) = destination["cloud_run_service"]
    assert run["service"] == (
        "${google_cloudfunctions2_function.function[each.key].service_config[0].service}"
    )
    assert trigger["service_account"] == "${google_service_account.eventarc.email}"
    depends = trigger["depends_on"]
    assert "${google_cloud_run_v2_service_iam_member.eventarc_invokes}" in depends
    assert (
        _resource(terraform, "google_cloud_run_v2_service_iam_member", "eventarc_invokes")[
            "for_each"
        ]
        == "${local.delivered}"
    )  # one binding per trigger, so depends_on covers this function's


@pytest.mark.parametrize("function", sorted(DELIVERED))
def test_gcr_push_subscription_is_authenticated_and_dead_lettered(
    terraform: dict[str, Any], function: str
) -> None:
    assert function in _delivered(terraform)
    sub = _resource(terraform, "google_pubsub_subscription", "gcr")
    assert sub["for_each"] == "${local.delivered}"
    assert "${each.key}" in sub["name"]
    assert "gcr" in sub["topic"]
    assert "var.functions[each.key].timeout_seconds" in sub["ack_deadline_seconds"]
    (push,) = sub["push_config"]
    assert push["push_endpoint"] == "${google_cloudfunctions2_function.function[each.key].url}"
    (oidc,) = push["oidc_token"]
    assert oidc["service_account_email"] == "${google_service_account.push.email}"
    # the audience Cloud Run checks: the function's URL unless var.push_audience says otherwise
    assert "var.push_audience" in oidc["audience"]
    assert "google_cloudfunctions2_function.function[each.key].url" in oidc["audience"]
    (dead,) = sub["dead_letter_policy"]
    assert dead["dead_letter_topic"] == "${google_pubsub_topic.dead_letter[each.key].id}"
    assert dead["max_delivery_attempts"] == "${var.max_delivery_attempts}"
    default = terraform["variable"]["max_delivery_attempts"]["default"]
    assert 5 <= default <= 100  # Pub/Sub's bounds
    # the dead-letter topic it names exists for this function
    dead_topics = _resource(terraform, "google_pubsub_topic", "dead_letter")
    assert dead_topics["for_each"] == "${var.functions}"
    assert function in terraform["variable"]["functions"]["default"]
    assert "${google_cloud_run_v2_service_iam_member.push_invokes}" in sub["depends_on"]
    # Pub/Sub's service agent acknowledges on it when it dead-letters
    acks = _resource(terraform, "google_pubsub_subscription_iam_member", "pubsub_acks_gcr")
    assert acks["for_each"] == "${local.delivered}"
    assert acks["subscription"] == "${google_pubsub_subscription.gcr[each.key].id}"
    assert acks["role"] == "roles/pubsub.subscriber"
    assert acks["member"] == "${local.pubsub_agent}"


def test_terraform_readme_says_what_reaches_each_function(terraform: dict[str, Any]) -> None:
    """Its table of deliveries is terraform's (`local.delivered`, prune's schedules, the rest
    nothing), and `make sources` builds a folder for every function."""
    readme = (TERRAFORM / "README.md").read_text()
    section = readme.split("## What reaches each function", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([a-z, ]+) \| (.+) \|$", section, re.MULTILINE)
    table = {frozenset(names.split(", ")): what for names, what in rows if names != "function"}
    assert set().union(*table) == set(NAMES) == set(terraform["variable"]["functions"]["default"])
    scheduled = _resource(terraform, "google_pubsub_subscription", "prune_schedule")
    (push,) = scheduled["push_config"]
    (target,) = re.findall(r'function\["(\w+)"\]', push["push_endpoint"])
    assert table[frozenset(_delivered(terraform))].endswith("`local.delivered`")
    assert "prune_schedules" in table[frozenset({target})]
    rest = frozenset(NAMES) - _delivered(terraform) - {target}
    assert table[rest].startswith("nothing"), table
    (built,) = re.findall(r"^make sources +# build/functions/\{([a-z,]+)\}$", readme, re.MULTILINE)
    assert set(built.split(",")) == set(NAMES)


def test_terraform_iam_bindings(terraform: dict[str, Any]) -> None:
    bindings = dict(terraform["resource"]["google_cloud_run_v2_service_iam_member"])
    scheduled = bindings.pop("prune_schedule_invokes")  # Pub/Sub pushes prune's schedule
    assert scheduled["member"] == "${google_service_account.push.member}"
    assert scheduled["count"] == "${length(var.prune_schedules) > 0 ? 1 : 0}"
    assert 'function["prune"]' in scheduled["name"]
    assert set(bindings) == {"eventarc_invokes", "push_invokes"}, (
        f"unexpected invokers: {sorted(bindings)}"
    )
    invokers = {binding["member"] for binding in bindings.values()}
    assert invokers == {
        "${google_service_account.eventarc.member}",
        "${google_service_account.push.member}",
    }
    for binding in bindings.values():
        # one per delivered function (register, sign), and no other function
        assert binding["for_each"] == "${local.delivered}"
        assert binding["role"] == "roles/run.invoker"
        assert binding["name"] == (
            "${google_cloudfunctions2_function.function[each.key].service_config[0].service}"
        )
    assert _delivered(terraform) == DELIVERED
    receiver = _resource(terraform, "google_project_iam_member", "eventarc_receiver")
    assert receiver["role"] == "roles/eventarc.eventReceiver"
    storage = _resource(terraform, "google_storage_bucket_iam_member", "function_models")
    assert storage["for_each"] == "${local.function_models_roles}"
    assert "fn.models_bucket_roles" in terraform["locals"]["function_models_roles"]
    assert storage["bucket"] == "${var.models_bucket}"
    assert storage["role"] == "${each.value.role}"
    assert storage["member"] == "${google_service_account.function[each.value.name].member}"
    # least privilege on the models bucket: register reads; sign reads and creates model.sig
    # (objectCreator alone cannot read; objectUser / objectAdmin could delete and overwrite)
    functions = terraform["variable"]["functions"]["default"]
    assert functions["register"].get("models_bucket_roles", ["roles/storage.objectViewer"]) == [
        "roles/storage.objectViewer"
    ]
    assert set(functions["sign"]["models_bucket_roles"]) == {
        "roles/storage.objectViewer",
        "roles/storage.objectCreator",
    }
    assert functions["sign"]["timeout_seconds"] == 900
    dead = _resource(terraform, "google_pubsub_topic_iam_member", "pubsub_dead_letters")
    assert dead["role"] == "roles/pubsub.publisher"
    # nobody is made a public invoker
    for rtype, named in terraform["resource"].items():
        for name, body in named.items():
            assert "allUsers" not in json.dumps(body), f"{rtype}.{name} is public"


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


_REFERENCE = re.compile(r"(?<![\w.])(var|local|data\.[a-z0-9_]+|google_[a-z0-9_]+)\.([a-z0-9_]+)")


def test_terraform_references_resolve_and_variables_are_used(terraform: dict[str, Any]) -> None:
    """What `terraform validate` would say first: no dangling reference, no dead variable."""
    declared = {
        "var": set(terraform["variable"]),
        "local": set(terraform.get("locals", {})),
        **{f"data.{t}": set(named) for t, named in terraform.get("data", {}).items()},
        **{t: set(named) for t, named in terraform["resource"].items()},
    }
    used: set[tuple[str, str]] = set()
    # a moved block's `from` names an address that no longer exists, by design
    checked = {k: v for k, v in terraform.items() if k not in ("variable", "moved")}
    checked["moved"] = [block["to"] for block in terraform.get("moved", [])]
    for text in _strings(checked):
        for expression in re.findall(r"\$\{.*\}", text, re.S):
            used |= set(_REFERENCE.findall(expression))
    dangling = {f"{kind}.{name}" for kind, name in used if name not in declared.get(kind, ())}
    assert not dangling, f"references to nothing declared: {sorted(dangling)}"
    unused = {name for name in declared["var"] if ("var", name) not in used}
    assert not unused, f"variables nothing reads: {sorted(unused)}"


def test_renamed_terraform_resources_are_moved_not_recreated(terraform: dict[str, Any]) -> None:
    """The per-function copies became for_each instances: `moved` keeps their state."""
    renamed = {
        ("google_eventarc_trigger", "models_finalized", "models_finalized", "register"),
        ("google_eventarc_trigger", "models_finalized_sign", "models_finalized", "sign"),
        ("google_pubsub_subscription", "gcr_register", "gcr", "register"),
        ("google_pubsub_subscription", "gcr_sign", "gcr", "sign"),
        (
            "google_pubsub_subscription_iam_member",
            "pubsub_acks_gcr_register",
            "pubsub_acks_gcr",
            "register",
        ),
        (
            "google_pubsub_subscription_iam_member",
            "pubsub_acks_gcr_sign",
            "pubsub_acks_gcr",
            "sign",
        ),
    } | {
        ("google_cloud_run_v2_service_iam_member", f"{who}_invokes_{f}", f"{who}_invokes", f)
        for who in ("eventarc", "push")
        for f in DELIVERED
    }
    expected = {
        (f"${{{rtype}.{old}}}", f'${{{rtype}.{new}["{key}"]}}') for rtype, old, new, key in renamed
    }
    moves = [(block["from"], block["to"]) for block in terraform.get("moved", [])]
    assert len(moves) == len(set(moves)) and set(moves) == expected
    for rtype, old, new, key in renamed:
        assert key in _delivered(terraform)
        assert _resource(terraform, rtype, new)["for_each"] == "${local.delivered}"
        if old != new:
            assert old not in terraform["resource"][rtype], f"{rtype}.{old} is still declared"


EXAMPLES = INFRA / "examples"  # applied on their own, never by the kustomization
JOB = INFRA / "k8s" / "transfer"  # the async-upload Job example: applied on its own too
INSTALL_NAMESPACE = "modelhooks"
# what the install may create outside any namespace; every other kind is namespaced
CLUSTER_SCOPED = {
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


PLAIN = INFRA / "kubernetes"  # the install without Knative (tests/tools/plain_kubernetes.py)


def _installed() -> list[Path]:
    """What `kubectl apply -k infra/` installs (the Knative install)."""
    return [
        p for p in _manifests(INFRA) if not any(p.is_relative_to(d) for d in (EXAMPLES, JOB, PLAIN))
    ]


def _shared() -> list[Path]:
    """infra/k8s, which both installs share: the CRDs, RBAC and admission (not the Job)."""
    return [p for p in _manifests(INFRA / "k8s") if not p.is_relative_to(JOB)]


def _kustomized(folder: Path) -> set[Path]:
    """The files a kustomization lists, through the folders it lists."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    found: set[Path] = set()
    for resource in kustomization["resources"]:
        path = (folder / resource).resolve()
        found |= _kustomized(path) if path.is_dir() else {path}
    return found


@pytest.mark.parametrize(
    ("folder", "manifests"),
    [
        (INFRA, _installed),
        (PLAIN, lambda: [*_manifests(PLAIN), *_shared()]),
    ],
    ids=["knative", "kubernetes"],
)
def test_the_kustomization_installs_every_manifest_on_the_image_they_name(
    folder: Path, manifests: Any
) -> None:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    wanted = {p.resolve() for p in manifests()}
    assert _kustomized(folder) == wanted, _kustomized(folder) ^ wanted
    assert _manifests(EXAMPLES), "infra/examples holds no example"
    (image,) = kustomization["images"]
    used = set(re.findall(r"image: (\S+):", "".join(p.read_text() for p in wanted)))
    assert used == {image["name"]}, used


def test_the_install_puts_every_namespaced_object_in_one_namespace() -> None:
    """Whatever kubectl's current namespace: each manifest names it, the kustomization holds
    it, and the bindings' subjects are the ServiceAccounts there (the install on a real
    apiserver: tests/integration/test_install.py)."""
    kustomization = yaml.safe_load((INFRA / "kustomization.yaml").read_text())
    assert kustomization.get("namespace") == INSTALL_NAMESPACE
    docs = [d for path in _installed() for d in _load(path)]
    for doc in docs:
        where = doc["metadata"].get("namespace")
        what = f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in CLUSTER_SCOPED:
            assert where is None, f"{what} is cluster-scoped but names namespace {where}"
        else:
            assert where == INSTALL_NAMESPACE, f"{what} lands in {where or 'the current one'}"
        for subject in doc.get("subjects", []):
            assert subject["namespace"] == INSTALL_NAMESPACE, (what, subject)
    assert "PingSource" not in {d["kind"] for d in docs}, "a sample schedule is installed"
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == INSTALL_NAMESPACE


def test_the_broker_without_knative_waits_for_a_function_as_long_as_knative_would(
    knative: list[dict[str, Any]], services: dict[str, dict[str, Any]]
) -> None:
    """Without Knative nothing bounds a function's request but the broker's router.timeout:
    it allows each function Service's timeoutSeconds, and transfer stops its copy
    (MODELHOOKS_TRANSFER_TIMEOUT) before that, answering 503 itself, instead of the broker
    answering 503 while the copy goes on."""
    plain = _docs(PLAIN)
    broker = _kind(plain, "Deployment")["modelhooks-broker"]
    env = {k: v for k, v in _env(broker, _kind(plain, "ConfigMap")) if v is not None}
    waits = load_settings(env=env).router.timeout
    configmaps = _kind(knative, "ConfigMap")
    routed = {
        name: service
        for name, service in services.items()
        if FUNCTION_LABEL in service["spec"]["template"]["metadata"].get("labels", {})
    }
    assert "modelhooks-transfer" in routed
    for name, service in routed.items():
        allowed = service["spec"]["template"]["spec"].get("timeoutSeconds", 300)
        assert allowed <= waits, f"the broker gives up on {name} after {waits:g} s < {allowed} s"
    transfer = routed["modelhooks-transfer"]
    own = {k: v for k, v in _env(transfer, configmaps) if v is not None}
    assert (
        load_settings(env=own).transfer.timeout
        < transfer["spec"]["template"]["spec"]["timeoutSeconds"]
    )


def test_watch_models_without_knative_selects_the_namespaces_the_apiserversource_does(
    knative: list[dict[str, Any]], rbac: list[dict[str, Any]]
) -> None:
    """Only the Models of opted-in namespaces become events in either install: the plain
    install's watch-models is given the ApiServerSource's namespaceSelector, runs as its
    identity, which may follow namespaces, and the example team namespace is opted in."""
    (source,) = _kind(knative, "ApiServerSource").values()
    labels = source["spec"]["namespaceSelector"]["matchLabels"]
    watch = _kind(_docs(PLAIN), "Deployment")["modelhooks-watch-models"]["spec"]["template"]
    (container,) = watch["spec"]["containers"]
    assert container["command"][0] == "modelhooks"
    args = build_parser().parse_args([*container["command"][1:], *container["args"]])
    selected = dict(term.split("=") for term in args.namespace_selector.split(","))
    assert selected == labels
    account = watch["spec"]["serviceAccountName"]
    assert account == source["spec"]["serviceAccountName"]
    assert _allows(_rules_of(rbac, account), "", "namespaces", {"list", "watch"})
    (team,) = _kind(_load(EXAMPLES / "namespace.yaml"), "Namespace").values()
    assert labels.items() <= team["metadata"]["labels"].items()


_BROKER_URL = re.compile(
    r"(?:broker-ingress\.knative-eventing\.svc\.cluster\.local|127\.0\.0\.1:8080)"
    r"/([\w-]+)/([\w-]+)"
)


def test_the_dead_letter_replay_urls_name_the_installed_broker(
    knative: list[dict[str, Any]],
) -> None:
    """`modelhooks replay --to` the Broker's ingress: /<its namespace>/<its name>."""
    (broker,) = _kind(knative, "Broker").values()
    expected = (broker["metadata"].get("namespace"), broker["metadata"]["name"])
    texts = {
        "infra/README.md": (INFRA / "README.md").read_text(),
        "README.md": (ROOT / "README.md").read_text(),
        **{str(p.relative_to(ROOT)): p.read_text() for p in _manifests(KNATIVE)},
    }
    found = {(where, url) for where, text in texts.items() for url in _BROKER_URL.findall(text)}
    assert {where for where, _ in found} >= {"infra/README.md", "infra/knative/dead-letter.yaml"}
    assert {url for _, url in found} == {expected}, found


def test_prune_schedules_publish_canonical_requests_pushed_to_prune(
    terraform: dict[str, Any],
) -> None:
    from modelhooks.events.model import PruneRequested

    job = _resource(terraform, "google_cloud_scheduler_job", "prune")
    assert job["for_each"] == "${var.prune_schedules}" and job["schedule"] == "${each.value}"
    (target,) = job["pubsub_target"]
    attributes = target["attributes"]
    assert attributes["ce-type"] == PruneRequested.TYPE and attributes["ce-specversion"] == "1.0"
    assert "ce-id" not in attributes  # the message id: each run is its own delivery
    assert target["data"].replace(" ", "") == "${base64encode(jsonencode({uri=each.key}))}"
    sub = _resource(terraform, "google_pubsub_subscription", "prune_schedule")
    (push,) = sub["push_config"]
    assert push["push_endpoint"] == '${google_cloudfunctions2_function.function["prune"].url}'
    (oidc,) = push["oidc_token"]
    assert oidc["service_account_email"] == "${google_service_account.push.email}"
    (dead,) = sub["dead_letter_policy"]
    assert dead["dead_letter_topic"] == '${google_pubsub_topic.dead_letter["prune"].id}'
