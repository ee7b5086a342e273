"""`modelhooks prune plan|apply oci://HOST/REPOSITORY`: tag retention for one repository.

    modelhooks prune plan oci://registry.example.com/models/bert --stream 'v*' --keep 5
    modelhooks prune plan … --untagged-hours 168 --json > plan.json   # the exact plan
    modelhooks prune apply oci://registry.example.com/models/bert --plan plan.json

`plan` prints every tag, kept (and why: a digest a live version in the model registry
uses is, as in the prune function; with no SQLite registry in --home none is, and none is
created) or deleted (and why), and the manifests it would delete (with `--untagged-hours`: those its deletes leave untagged, or untagged already
where the registry lists them, pushed longer ago); nothing is changed. `apply` deletes
exactly what the plan file says, in the order that leaves nothing dangling — the
manifests' referrers, the tags (a tag moved since planning is skipped), the manifests (one
a tag names since planning stays, with its referrers) — with a progress bar; what is gone
already is fine.
Exit status: 0 done, 2 a bad argument or plan, 3 the registry did not answer, 130 interrupted
(the line before says how many deletes were done: apply the same plan again).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from modelhooks.cli import argtypes
from modelhooks.core.errors import BadRequest
from modelhooks.core.retention import Decision, Plan, Policy, apply, plan, spare_referred

__all__ = ["SETTINGS", "add_parser"]

SETTINGS = frozenset({"home", "log_level", "oci", "store", "registry"})


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    prune = sub.add_parser("prune", help="tag retention for an OCI repository (plan, apply)")
    steps = prune.add_subparsers(dest="prune_command", metavar="{plan,apply}", required=True)
    p = steps.add_parser("plan", parents=[common], help="print what a policy keeps and deletes")
    p.add_argument("repository", metavar="oci://HOST/REPOSITORY", type=argtypes.oci_repository)
    p.add_argument("--stream", action="append", metavar="GLOB", help="a tag stream (repeatable)")
    p.add_argument(
        "--keep", type=argtypes.count, default=10, help="the newest N of each stream (10)"
    )
    p.add_argument(
        "--protect",
        action="append",
        metavar="REGEX",
        type=argtypes.regex,
        help="never delete (default: latest)",
    )
    p.add_argument(
        "--grace-hours", type=argtypes.hours, default=24.0, help="spare what is newer (24)"
    )
    p.add_argument(
        "--untagged-hours",
        type=argtypes.hours,
        help="also delete manifests left untagged that are older (default: keep manifests)",
    )
    p.add_argument("--json", action="store_true", help="the plan as JSON (for apply --plan)")
    p.set_defaults(func=run_plan)
    a = steps.add_parser("apply", parents=[common], help="delete exactly the tags of a plan")
    a.add_argument("repository", metavar="oci://HOST/REPOSITORY", type=argtypes.oci_repository)
    a.add_argument("--plan", type=Path, required=True, help="a plan printed by `plan --json`")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=run_apply)


def _registry(args: argparse.Namespace) -> tuple[Any, str]:
    client, repo, _ = _deps(args)
    return client, repo


def _deps(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """(the repository's registry client, its repository, the model registry: None when
    the settings' is SQLite and `<home>/registry.db` is not there, which is not created:
    a plan changes nothing)."""
    from modelhooks.bootstrap import build
    from modelhooks.cli import common

    settings = common.settings(args)
    if settings.registry.backend == "sqlite" and not (settings.home / "registry.db").is_file():
        deps = build(settings, registry=None).deps
    else:
        deps = build(settings).deps
    uri = args.repository if args.repository.startswith("oci://") else f"oci://{args.repository}"
    client, repo, _ = deps.oci.registry_for(uri)
    return client, repo, deps.registry


def run_plan(args: argparse.Namespace) -> int:
    policy = Policy(
        streams=tuple(args.stream or ()),
        keep=args.keep,
        protect=tuple(args.protect or (r"^latest$",)),
        grace=timedelta(hours=args.grace_hours),
        untagged=None if args.untagged_hours is None else timedelta(hours=args.untagged_hours),
    )
    from modelhooks.cli import common
    from modelhooks.handlers.prune import in_use

    client, repo, registry = _deps(args)
    tags, untagged = client.history(repo)
    if registry is None:
        print(
            f"no model registry at {(common.settings(args).home / 'registry.db').resolve()}: "
            "no registered version is in use here (--home or --registry-* name the one "
            "`modelhooks serve` uses)",
            file=sys.stderr,
        )
    used = frozenset() if registry is None else in_use(registry)  # as the prune function
    result = plan(tags, policy, untagged=untagged, in_use=used, now=datetime.now(UTC))
    result = spare_referred(client, repo, result, in_use=used)
    if args.json:
        print(json.dumps(_plan_json(args.repository, result), indent=2))
        return 0
    rows = [("keep", result.keep), ("delete", result.delete), ("delete", result.manifests)]
    for verb, decisions in rows:
        for d in decisions:
            print(f"{verb:6}  {d.tag or '(manifest)':30}  {d.digest[:19]}  {d.reason}")
    print(
        f"{len(result.keep)} tags kept, {len(result.delete)} tags and "
        f"{len(result.manifests)} manifests to delete",
        file=sys.stderr,
    )
    return 0


def run_apply(args: argparse.Namespace) -> int:
    try:
        doc = json.loads(_plan_text(args.plan))
        planned = Plan(
            delete=tuple(_decision(d) for d in doc["delete"]),
            manifests=tuple(_decision(d) for d in doc.get("manifests", ())),
            keep=tuple(_decision(d) for d in doc.get("keep", ())),
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise BadRequest(
            f"{args.plan}: not a plan from `modelhooks prune plan --json` ({exc})"
        ) from None
    if doc.get("repository") != args.repository:
        raise BadRequest(
            f"{args.plan} is the plan of {doc.get('repository')!r}, not {args.repository!r}"
        )
    client, repo = _registry(args)
    from tqdm import tqdm

    from modelhooks.cli import common

    total = len(planned.delete) + len(planned.manifests)
    with tqdm(total=total, desc="prune", unit="del", file=sys.stderr, disable=args.quiet) as bar:

        def deleted() -> str:
            return f"{bar.n} of {total} deletes done; apply the same plan again to finish"

        with common.interruptible(deleted):
            done = apply(client, repo, planned, progress=bar.update)
    for tag in done.skipped:
        print(
            f"skip    {tag}: it is gone or names another digest now (plan again)", file=sys.stderr
        )
    for digest in done.held:
        print(f"skip    {digest}: a tag names it now (plan again)", file=sys.stderr)
    for tag in done.deleted:
        print(f"deleted {tag}")
    for digest in done.referrers + done.manifests:
        print(f"deleted {digest}")
    return 0


def _decision(row: dict[str, str]) -> Decision:
    return Decision(str(row.get("tag", "")), str(row["digest"]), str(row["reason"]))


def _plan_json(repository: str, result: Plan) -> dict[str, Any]:
    def rows(decisions: tuple[Decision, ...]) -> list[dict[str, str]]:
        return [{"tag": d.tag, "digest": d.digest, "reason": d.reason} for d in decisions]

    return {
        "repository": repository,
        "keep": rows(result.keep),
        "delete": rows(result.delete),
        "manifests": rows(result.manifests),
    }


MAX_PLAN_BYTES = 64 << 20  # a plan's: a repository's every tag, with room to spare


def _plan_text(path: Path) -> str:
    """The plan file's text, read as at most MAX_PLAN_BYTES (`--plan /dev/zero` was read
    without end; JSON nested past the parser's recursion was an internal error, exit 70)."""
    with path.open(encoding="utf-8") as f:
        text = f.read(MAX_PLAN_BYTES + 1)
    if len(text) > MAX_PLAN_BYTES:
        raise ValueError(f"over {MAX_PLAN_BYTES} characters")
    return text
