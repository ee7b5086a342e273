"""`modelhooks prune plan|apply oci://HOST/REPOSITORY`: tag retention for one repository.

    modelhooks prune plan oci://registry.example.com/models/bert --stream 'v*' --keep 5
    modelhooks prune plan … --json > plan.json          # the exact plan, to review
    modelhooks prune apply oci://registry.example.com/models/bert --plan plan.json

`plan` prints every tag, kept (and why) or deleted (and why); nothing is changed. `apply`
deletes exactly the tags of the plan file it is given (each tag is removed, its manifest
kept: another tag or a referrer may still need it); a tag deleted already is fine.
Exit status: 0 done, 2 a bad argument or plan, 3 the registry did not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from modelhooks.core.errors import BadRequest
from modelhooks.core.retention import Decision, Plan, Policy, history, plan

__all__ = ["SETTINGS", "add_parser"]

SETTINGS = frozenset({"home", "log_level", "oci", "store"})


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    prune = sub.add_parser("prune", help="tag retention for an OCI repository (plan, apply)")
    steps = prune.add_subparsers(dest="prune_command", required=True)
    p = steps.add_parser("plan", parents=[common], help="print what a policy keeps and deletes")
    p.add_argument("repository", metavar="oci://HOST/REPOSITORY")
    p.add_argument("--stream", action="append", metavar="GLOB", help="a tag stream (repeatable)")
    p.add_argument("--keep", type=int, default=10, help="the newest N of each stream (10)")
    p.add_argument(
        "--protect", action="append", metavar="REGEX", help="never delete (default: latest)"
    )
    p.add_argument("--grace-hours", type=float, default=24.0, help="spare what is newer (24)")
    p.add_argument("--json", action="store_true", help="the plan as JSON (for apply --plan)")
    p.set_defaults(func=run_plan)
    a = steps.add_parser("apply", parents=[common], help="delete exactly the tags of a plan")
    a.add_argument("repository", metavar="oci://HOST/REPOSITORY")
    a.add_argument("--plan", type=Path, required=True, help="a plan printed by `plan --json`")
    a.set_defaults(func=run_apply)


def _registry(args: argparse.Namespace) -> tuple[Any, str]:
    from modelhooks.bootstrap import build
    from modelhooks.cli import common

    settings = common.settings(args)
    uri = args.repository if args.repository.startswith("oci://") else f"oci://{args.repository}"
    client, repo, _ = build(settings).deps.oci.for_uri(uri)
    return client, repo


def run_plan(args: argparse.Namespace) -> int:
    policy = Policy(
        streams=tuple(args.stream or ()),
        keep=args.keep,
        protect=tuple(args.protect or (r"^latest$",)),
        grace=timedelta(hours=args.grace_hours),
    )
    client, repo = _registry(args)
    result = plan(history(client, repo), policy, now=datetime.now(UTC))
    if args.json:
        print(json.dumps(_plan_json(args.repository, result), indent=2))
        return 0
    for verb, decisions in (("keep", result.keep), ("delete", result.delete)):
        for d in decisions:
            print(f"{verb:6}  {d.tag:30}  {d.digest[:19]}  {d.reason}")
    print(f"{len(result.keep)} kept, {len(result.delete)} to delete", file=sys.stderr)
    return 0


def run_apply(args: argparse.Namespace) -> int:
    try:
        doc = json.loads(args.plan.read_text())
        deletes = [Decision(d["tag"], d["digest"], d["reason"]) for d in doc["delete"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadRequest(
            f"{args.plan}: not a plan from `modelhooks prune plan --json` ({exc})"
        ) from None
    if doc.get("repository") != args.repository:
        raise BadRequest(
            f"{args.plan} is the plan of {doc.get('repository')!r}, not {args.repository!r}"
        )
    client, repo = _registry(args)
    for d in deletes:
        if client.resolve(repo, d.tag) not in (None, d.digest):
            print(f"skip    {d.tag}: it names another digest now (plan again)", file=sys.stderr)
            continue
        client.delete_tag(repo, d.tag)
        print(f"deleted {d.tag}  ({d.reason})")
    return 0


def _plan_json(repository: str, result: Plan) -> dict[str, Any]:
    def rows(decisions: tuple[Decision, ...]) -> list[dict[str, str]]:
        return [{"tag": d.tag, "digest": d.digest, "reason": d.reason} for d in decisions]

    return {"repository": repository, "keep": rows(result.keep), "delete": rows(result.delete)}
