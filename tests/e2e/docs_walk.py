"""Every command of every ```sh block of the READMEs a user follows, and how the walker
(tests/e2e/test_readme.py) checks it: RUN verbatim here, against the real servers where it
needs them, or CHECKED another way, with the reason it cannot run here (a Google Cloud
project, a running Knative, a pod). A command no rule claims fails the walker, so a new
block cannot be added untested.

A command is a line of a block with its `\\` continuations joined, as bash runs it. What a
user puts in place of a placeholder (`<registry>`, `<register URL>`, `…`) and the port a
server listens on are the only things the walk substitutes (`Walk.substitutions`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "infra/README.md", "terraform/gcp/README.md")
TRY_IT = ("drop", "replay", "sign")  # README blocks run by the Try-it test, in order

_BLOCK = re.compile(r"(?:<!-- readme-test: (?P<name>\w+) -->\n)?```sh\n(?P<body>.*?)```", re.S)


@dataclass(frozen=True)
class Command:
    doc: str
    line: int  # in the doc
    block: str | None  # its `<!-- readme-test: NAME -->` marker
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def commands(doc: str) -> list[Command]:
    """The commands of every ```sh block of `doc`, in order."""
    text = (ROOT / doc).read_text()
    found = []
    for block in _BLOCK.finditer(text):
        first = text.count("\n", 0, block.start("body")) + 1
        pending: list[str] = []
        start = 0
        for n, raw in enumerate(block["body"].splitlines()):
            start = start if pending else n
            pending.append(raw.removesuffix("\\"))
            if raw.endswith("\\"):
                continue
            joined, pending = "".join(pending).strip(), []
            if joined and not joined.startswith("#"):
                found.append(Command(doc, first + start, block["name"], joined))
    return found


@dataclass
class Walk:
    """Where the commands of one doc run: a checkout-like directory, the environment (PATH
    with kubectl and the venv's modelhooks, KUBECONFIG), what the user substitutes."""

    cwd: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    substitutions: dict[str, str] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)  # learnt from earlier commands
    done: list[str] = field(default_factory=list)  # "RUN …" / "CHECKED …: reason"

    def filled(self, text: str) -> str:
        for placeholder, value in self.substitutions.items():
            text = text.replace(placeholder, value)
        return text

    def sh(self, text: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", text], cwd=self.cwd, env=self.env, capture_output=True, text=True
        )


Check = Callable[[Command, re.Match[str], Walk], None]


@dataclass(frozen=True)
class Rule:
    pattern: str  # matched against the command's text
    reason: str  # why it is checked rather than run ("" for a rule that runs it)
    check: Check | None = None  # None: run verbatim, and it must succeed
    block: str | None = None  # only commands of blocks with this marker
    elsewhere: bool = False  # run by another test (the check makes sure it exists)

    def matches(self, command: Command) -> re.Match[str] | None:
        if self.block is not None and command.block != self.block:
            return None
        return re.search(self.pattern, command.text)

    def apply(self, command: Command, walk: Walk) -> None:
        match = self.matches(command)
        assert match is not None
        if self.check is not None:
            self.check(command, match, walk)
            said = f"RUN {command}\n    by {self.reason}" if self.elsewhere else None
            walk.done.append(said or f"CHECKED {command}\n    {self.reason}")
            return
        text = walk.filled(command.text)
        if text.startswith("cd ") and "&&" not in text:  # the following commands run there
            walk.cwd = (walk.cwd / shlex.split(text)[1]).resolve()
        else:
            done = walk.sh(text)
            assert done.returncode == 0, (
                f"{command}\nran: {text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        walk.done.append(f"RUN {command}")


def rule_for(command: Command) -> Rule:
    """The first rule of the command's doc that claims it (AssertionError if none does)."""
    for rule in RULES[command.doc]:
        if rule.matches(command):
            return rule
    raise AssertionError(
        f"{command}\nno rule of tests/e2e/docs_walk.py claims this command: run it in the "
        "walk (the servers it needs are fixtures) or check it and say why it cannot run here"
    )


# --- checks ---------------------------------------------------------------------------------


def make_renders(command: Command, match: re.Match[str], walk: Walk) -> None:
    """`make -n TARGET` in the repository: the target exists and its recipe renders."""
    target = match["target"]
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{command}: make -n {target}\n{done.stderr}"
    expected = {"run": "modelhooks serve", "sources": "cloud_run_sources"}.get(target, "")
    assert expected in done.stdout, f"{command}: make -n {target} runs no {expected!r}"


def referenced(test: str, needle: str) -> Check:
    """The command is run by another test (named, with what it must contain)."""

    def check(command: Command, match: re.Match[str], walk: Walk) -> None:
        path = ROOT / test
        assert path.is_file(), f"{command}: {test} (which runs it) is missing"
        assert needle in path.read_text(), f"{command}: {test} does not run {needle!r}"

    return check


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomize_image(command: Command, match: re.Match[str], walk: Walk) -> None:
    (kustomization,) = _yaml_docs(ROOT / "infra" / "kustomization.yaml")
    names = [image["name"] for image in kustomization.get("images", [])]
    assert match["image"] in names, f"{command}: infra/kustomization.yaml names images {names}"


def dead_letter_mount(command: Command, match: re.Match[str], walk: Walk) -> None:
    manifests = _yaml_docs(ROOT / "infra" / "knative" / "dead-letter.yaml")
    text = repr(manifests)
    mounts = re.findall(r"'mountPath': '([^']+)'", text)
    assert any(match["path"].startswith(m) for m in mounts), (command, mounts)
    assert (walk.cwd / "dead-letter").is_dir()  # what the copy gives: written by the walk


def broker_path(command: Command, match: re.Match[str], walk: Walk) -> None:
    brokers = [
        d for d in _yaml_docs(ROOT / "infra" / "knative" / "broker.yaml") if d["kind"] == "Broker"
    ]
    paths = [f"/{b['metadata']['namespace']}/{b['metadata']['name']}" for b in brokers]
    assert match["path"] in paths, f"{command}: the Broker's ingress paths are {paths}"


def terraform() -> dict[str, Any]:
    """terraform/gcp/*.tf's variables, resources and `terraform` blocks, merged."""
    import hcl2  # the dev extra installs python-hcl2

    options = hcl2.SerializationOptions(
        with_comments=False, explicit_blocks=False, strip_string_quotes=True
    )
    merged: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "terraform" / "gcp").glob("*.tf")):
        with path.open() as f:
            for kind, blocks in hcl2.load(f, serialization_options=options).items():
                for block in blocks:
                    for name, body in block.items():
                        merged.setdefault(kind, {}).setdefault(name, body)
    return merged


def terraform_providers(command: Command, match: re.Match[str], walk: Walk) -> None:
    (required,) = terraform()["terraform"]["required_providers"]
    assert "version" in required["google"], f"{command}: the google provider is not pinned"


def given_vars(text: str) -> dict[str, str]:
    words = shlex.split(text, comments=True)
    pairs = [words[i + 1] for i, w in enumerate(words) if w == "-var"]
    return dict(p.split("=", 1) for p in pairs)


def terraform_apply(command: Command, match: re.Match[str], walk: Walk) -> None:
    """What `terraform plan` checks first: every -var is declared, every variable without a
    default is given."""
    declared = terraform()["variable"]
    given = given_vars(command.text)
    assert not set(given) - set(declared), f"{command}: undeclared {set(given) - set(declared)}"
    needed = {name for name, v in declared.items() if "default" not in v}
    assert not needed - set(given), f"{command}: {needed - set(given)} have no default"
    walk.facts.update({f"var.{k}": v for k, v in given.items()})


def gcloud_secret(command: Command, match: re.Match[str], walk: Walk) -> None:
    """The secret created is one terraform is told to use: the signing key (a `terraform
    apply -var`), or a value of `transfer_secrets` (the doc's ```hcl tfvars)."""
    import hcl2

    told = {walk.facts.get("var.signing_key_secret")}
    for block in re.findall(r"```hcl\n(.*?)```", (ROOT / command.doc).read_text(), re.S):
        told.update(v.strip('"') for v in hcl2.loads(block).get("transfer_secrets", {}).values())
    assert match["name"] in told, f"{command}: terraform is told of {told}"


def gcloud_dead_letter(command: Command, match: re.Match[str], walk: Walk) -> None:
    """The subscription pulled is a function's dead-letter subscription in terraform."""
    tf = terraform()
    pattern = tf["resource"]["google_pubsub_subscription"]["dead_letter"]["name"]
    prefix = tf["variable"]["name_prefix"]["default"]
    names = [
        pattern.replace("${var.name_prefix}", prefix).replace("${each.key}", fn)
        for fn in tf["variable"]["functions"]["default"]
    ]
    assert match["name"] in names, f"{command}: the dead-letter subscriptions are {names}"
    assert (walk.cwd / match["out"]).is_file()  # what the pull prints: written by the walk


# --- the rules, per doc (first match wins) ----------------------------------------------------

NO_CLOUD = "needs a Google Cloud project (none here)"

RULES: dict[str, list[Rule]] = {
    "README.md": [
        *(
            Rule(
                r".",
                "test_the_try_it_section_works_as_written, verbatim, in order",
                referenced("tests/e2e/test_readme.py", "def test_the_try_it_section_works"),
                block,
                elsewhere=True,
            )
            for block in TRY_IT
        ),
        Rule(
            r"^make (?P<target>run|test)\b",
            "long-running: `make run` serves until Ctrl-C (the Try-it test starts what its "
            "recipe runs), `make test` is this suite; its recipe is rendered with make -n",
            make_renders,
        ),
    ],
    "infra/README.md": [
        Rule(
            r"^kubectl (apply -k infra/kubernetes/|-n modelhooks wait .*deployment)",
            "tests/e2e/test_functions_as_pods.py, on the harness's real node (its Pods on the "
            "host network: no kube-proxy there), the install rendered by kubectl's kustomize",
            referenced("tests/e2e/pods.py", '"kustomize", "infra/kubernetes"'),
            elsewhere=True,
        ),
        Rule(
            r"^kubectl apply -k infra/",
            "tests/integration/test_install.py, on a harness kube-apiserver with Knative's "
            "CRDs installed (not duplicated here)",
            referenced("tests/integration/test_install.py", '"apply", "-k", "infra/"'),
            elsewhere=True,
        ),
        Rule(
            r"kustomize edit set image (?P<image>[^=\s]+)=",
            "the standalone kustomize CLI is not installed here (kubectl's has no `edit`); "
            "checked: the image it sets is the one infra/kustomization.yaml names",
            kustomize_image,
        ),
        Rule(
            r"^kubectl .*\bcp .+?:(?P<path>/\S+) ",
            "copies out of a running dead-letter pod, and no pod runs here (no kubelet); "
            "checked: the path is the dead-letter Service's volume; the walk writes the copy "
            "as `modelhooks dead-letter` writes it",
            dead_letter_mount,
        ),
        Rule(
            r"^kubectl .*\bport-forward ",
            "Knative Eventing's broker-ingress does not run here: `modelhooks serve` (routing as "
            "the Broker's Triggers do) listens where the port is forwarded",
            lambda command, match, walk: None,
        ),
        Rule(
            r"^modelhooks replay .*--to http://broker-ingress\.[^/]+(?P<path>/\S+)",
            "an in-cluster address; the walk replays the same folder through the forwarded "
            "port below; checked: the path is the Broker's (infra/knative/broker.yaml)",
            broker_path,
        ),
        Rule(r"^(kubectl|modelhooks) ", ""),
    ],
    "terraform/gcp/README.md": [
        Rule(
            r"^make (?P<target>sources)\b",
            "builds every function's folder in the repository; tests/e2e/test_packaging.py "
            "builds them the same way and serves each from a fresh venv; rendered with make -n",
            make_renders,
        ),
        Rule(r"^cd terraform/gcp$", ""),
        Rule(
            r"^terraform init$",
            "downloads the Google provider from registry.terraform.io (not reachable here); "
            "checked: terraform/gcp pins it (required_providers, parsed with python-hcl2)",
            terraform_providers,
        ),
        Rule(
            r"^terraform apply ",
            f"{NO_CLOUD}; checked as `terraform plan` would first: every -var is declared "
            "and every variable without a default is given (python-hcl2)",
            terraform_apply,
        ),
        Rule(
            r"^(printf %s \S+ \| )?gcloud secrets create (?P<name>\S+) ",
            f"{NO_CLOUD}; checked: it is the secret terraform apply is given",
            gcloud_secret,
        ),
        Rule(
            r"^gcloud pubsub subscriptions pull (?P<name>\S+) .*> (?P<out>\S+)",
            f"{NO_CLOUD}; checked: it is a dead-letter subscription of terraform/gcp; the "
            "walk writes what it prints (gcloud's --format=json of pulled messages)",
            gcloud_dead_letter,
        ),
        Rule(r"^modelhooks replay ", ""),
    ],
}
