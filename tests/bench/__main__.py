"""`make bench`: every benchmark, each printing its figures next to its anchor."""

from __future__ import annotations

import sys

from tests.bench import bench_signing, bench_spine


def main() -> int:
    print("== spine: register vs a bare functions-framework function", flush=True)
    status = bench_spine.main([])
    print("\n== signing: streamed model-signing vs model_signing's own API", flush=True)
    bench_signing.main()
    return status


if __name__ == "__main__":
    sys.exit(main())
