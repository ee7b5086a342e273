"""`modelhooks cleanup MODEL[/VERSION]`: apply a deletion policy to a model's artifacts by
hand, as the `cleanup` function does when the model is deleted now.

    modelhooks cleanup bert --policy Delete --dry-run      # the plan: what goes, what stays
    modelhooks cleanup bert/3 --policy Untag                # then exactly that plan

The locations are the registered versions' (of VERSION only, if given); the policy is
`--policy`, else the first `cleanup.policy_file` entry matching MODEL, else Retain. The
plan is printed as a table (every object, tag, referrer and manifest that goes, and what
stays and why); unless `--dry-run`, exactly that list is deleted, with a progress bar.
Nothing a live version of another model uses goes. The registration is left as it is.
Exit status: 0 done, 2 a bad argument or policy, 3 a backend did not answer (run again:
what is gone stays gone), 130 interrupted (likewise).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from modelhooks.core.errors import BadRequest

__all__ = ["SETTINGS", "add_parser"]

SETTINGS = frozenset({"home", "log_level", "oci", "store", "registry", "layout", "cleanup"})


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "cleanup", parents=[common], help="a model's deletion policy by hand (plan, then apply)"
    )
    p.add_argument("model", metavar="MODEL[/VERSION]")
    p.add_argument("--policy", choices=["Retain", "Delete", "Untag"], help="default: the file's")
    p.add_argument("--dry-run", action="store_true", help="print the plan; delete nothing")
    p.add_argument("--json", action="store_true", help="the plan (and result) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from modelhooks.bootstrap import build
    from modelhooks.cli import common
    from modelhooks.core.cleanup import Policy
    from modelhooks.core.records import stamp
    from modelhooks.events.model import CanonicalEvent, ModelDeleted
    from modelhooks.handlers.cleanup import in_use, plan, policy_of, targets

    deps = build(common.settings(args)).deps
    name, version = common.model_and_version(deps.registry, args.model)
    deleted = ModelDeleted(name=name, version=version or None)
    now = stamp(
        CanonicalEvent(
            id="cli", source="cli", type=deleted.TYPE, data=deleted, time=datetime.now(UTC)
        )
    )
    policy = policy_of(deleted, deps.cleanup)
    if args.policy:
        policy = Policy.parse(args.policy, protect=policy.protect, old_versions=policy.old_versions)
    found = targets(deleted, deps.registry, since=now)
    if not found:
        raise BadRequest(f"{args.model}: no registered version to clean up")
    used = in_use(deps.registry, name, since=now)
    plans = [
        (
            target,
            *plan(
                target,
                policy,
                stores=deps.stores,
                oci=deps.oci,
                marker=deps.cleanup.marker,
                in_use=used,
            ),
        )
        for target in found
    ]
    rows: list[dict[str, Any]] = []
    for target, purge, _ in plans:
        for d in purge.deletions:
            rows.append(
                {
                    "location": target.uri,
                    "action": "delete",
                    "kind": d.kind,
                    "name": d.name,
                    "reason": d.reason,
                }
            )
        for kept, why in purge.kept:
            rows.append(
                {"location": target.uri, "action": "keep", "kind": "", "name": kept, "reason": why}
            )
    total = sum(len(p.deletions) for _, p, _ in plans)
    if not args.json:
        for row in rows:
            print(f"{row['action']:6}  {row['kind'] or '-':8}  {row['name']:50}  {row['reason']}")
        print(
            f"policy {policy.name}: {total} to delete in {len(plans)} location(s)", file=sys.stderr
        )
    failed: dict[str, str] = {}
    if not args.dry_run and total:
        with tqdm(
            total=total, desc="cleanup", unit="del", file=sys.stderr, disable=args.quiet
        ) as bar:

            def so_far() -> str:
                return f"{bar.n} of {total} deletes done; run it again to finish"

            with common.interruptible(so_far):
                for _, purge, apply in plans:
                    applied = apply(purge, bar.update)
                    failed |= applied.failed
                    for name, why in applied.kept[len(purge.kept) :]:  # changed since the plan
                        print(f"kept    {name}: {why}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {"policy": policy.name, "dry_run": args.dry_run, "plan": rows, "failed": failed},
                indent=2,
            )
        )
    for key, why in failed.items():
        print(f"failed  {key}: {why}", file=sys.stderr)
    return 2 if failed else 0
