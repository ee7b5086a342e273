"""The ObjectStore deletion contract: listing, `list_versions` and `delete_many`, which every
backend (local directory, S3, GCS, and any fake) must pass.

Use: subclass `ObjectStoreContract` and provide the fixtures
- `store`: the ObjectStore under test;
- `bucket`: a fresh, empty bucket; `versioned_bucket`: one with object versioning on
  (where the backend has no versioning, any fresh bucket);
- `traits`: a `Traits` saying what the backend does where backends differ;
- `requests`: a `Requests` counting the backend's list and delete requests, or None where
  there are no requests (a local directory).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import pytest

from modelhooks.core.ports import ObjectStore
from modelhooks.core.records import ObjectInfo

MANY = 2500  # crosses S3's and GCS's 1000-object pages and DeleteObjects' 1000-key limit


@dataclass(frozen=True)
class Traits:
    """Where backends differ, by design or by the server's limits."""

    page: int | None  # objects per list page (None: no pages, one directory walk)
    delete_batch: int  # objects one delete request carries (S3 DeleteObjects: 1000)
    checks_generation: bool  # delete_many keeps an object rewritten since listed
    versioning: bool  # keeps old revisions (versioned_bucket has versioning on)
    # {case: why the server under test cannot do it}; that case is skipped, saying so
    limits: Mapping[str, str] = field(default_factory=dict)

    def requires(self, case: str) -> None:
        if case in self.limits:
            pytest.skip(self.limits[case])


class Requests(Protocol):
    def reset(self) -> None: ...

    def count(self, kind: str) -> int:
        """Requests of `kind` ("list" or "delete") since the last reset."""
        ...


def put_all(store: ObjectStore, bucket: str, keys: Iterable[str], workers: int = 32) -> None:
    """Write every key (its own name as content), concurrently: 2,500 puts in seconds."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda key: store.put(bucket, key, key.encode()), keys))


def keys(infos: Iterable[ObjectInfo]) -> list[str]:
    return [i.key for i in infos]


class ObjectStoreContract:
    def test_is_an_object_store(self, store: ObjectStore) -> None:
        assert isinstance(store, ObjectStore)

    def test_list_is_paginated_and_complete(
        self, store: ObjectStore, bucket: str, traits: Traits, requests: Requests | None
    ) -> None:
        wanted = [f"many/{i:05d}" for i in range(MANY)]
        put_all(store, bucket, [*wanted, "many-not/x", "other/y"])
        if requests is not None:
            requests.reset()
        listed = list(store.list(bucket, "many/"))
        assert keys(listed) == wanted  # all of them, in key order, no neighbour
        assert all(i.current and i.generation for i in listed)
        if requests is not None and traits.page is not None:
            assert requests.count("list") == math.ceil(MANY / traits.page)

    def test_delete_many_crosses_request_limits(
        self, store: ObjectStore, bucket: str, traits: Traits, requests: Requests | None
    ) -> None:
        put_all(store, bucket, [*(f"bulk/{i:05d}" for i in range(MANY)), "bulk-kept"])
        listed = list(store.list(bucket, "bulk/"))
        assert len(listed) == MANY
        if requests is not None:
            requests.reset()
        assert store.delete_many(bucket, listed) == {}
        if requests is not None:
            sent = requests.count("delete")
            print(f"delete_many of {MANY} objects: {sent} delete requests")
            assert sent == math.ceil(MANY / traits.delete_batch)
        assert list(store.list(bucket, "bulk/")) == []
        assert keys(store.list(bucket, "bulk")) == ["bulk-kept"]
        assert store.delete_many(bucket, listed) == {}  # again: what is gone is success

    def test_delete_many_deletes_exactly_the_given_keys(
        self, store: ObjectStore, bucket: str
    ) -> None:
        put_all(store, bucket, ["m/1/a", "m/1/b/c", "m/1/d", "m/10/a", "m/1x", "m/2/a", "m1"])
        listed = list(store.list(bucket, "m/1/"))
        assert keys(listed) == ["m/1/a", "m/1/b/c", "m/1/d"]  # m/10/ is not under m/1/
        assert store.delete_many(bucket, [i for i in listed if i.key != "m/1/d"]) == {}
        assert keys(store.list(bucket)) == ["m/1/d", "m/10/a", "m/1x", "m/2/a", "m1"]
        assert store.stat(bucket, "m/10/a") is not None

    def test_deleting_again_succeeds(self, store: ObjectStore, bucket: str) -> None:
        put_all(store, bucket, ["gone/a", "gone/b"])
        listed = list(store.list(bucket, "gone/"))
        assert store.delete_many(bucket, listed) == {}
        assert store.delete_many(bucket, listed) == {}
        assert store.delete_many(bucket, []) == {}
        assert list(store.list(bucket, "gone/")) == []

    def test_an_object_changed_since_listed(
        self, store: ObjectStore, bucket: str, traits: Traits
    ) -> None:
        put_all(store, bucket, ["c/changed", "c/same"])
        listed = list(store.list(bucket, "c/"))
        store.put(bucket, "c/changed", b"rewritten, and longer")  # another size: see local.py
        if traits.checks_generation:
            traits.requires("changed_kept")
            result = store.delete_many(bucket, listed)
            assert list(result) == ["c/changed"]
            assert "changed" in result["c/changed"]
            assert store.read_range(bucket, "c/changed", 0, 100) == b"rewritten, and longer"
        else:  # S3: no precondition on DeleteObjects, deleted by key (documented)
            assert store.delete_many(bucket, listed) == {}
            assert store.stat(bucket, "c/changed") is None
        assert store.stat(bucket, "c/same") is None

    def test_list_versions_of_an_unversioned_bucket_is_list(
        self, store: ObjectStore, bucket: str
    ) -> None:
        put_all(store, bucket, ["u/a", "u/b/c", "u1"])
        store.put(bucket, "u/a", b"overwritten")
        versions = list(store.list_versions(bucket, "u/"))
        assert keys(versions) == keys(store.list(bucket, "u/")) == ["u/a", "u/b/c"]
        assert all(i.current for i in versions)

    def test_list_versions_and_delete_old_revisions(
        self, store: ObjectStore, versioned_bucket: str, traits: Traits
    ) -> None:
        bucket = versioned_bucket
        for data in (b"1", b"22", b"333"):
            store.put(bucket, "v/a", data)
        store.put(bucket, "v/b", b"b")
        store.put(bucket, "v1/x", b"neighbour")
        versions = list(store.list_versions(bucket, "v/"))
        if not traits.versioning:  # where no old revisions are kept: the same as list
            assert versions == list(store.list(bucket, "v/"))
            assert keys(versions) == ["v/a", "v/b"]
            assert all(i.current for i in versions)
            return
        assert keys(versions) == ["v/a", "v/a", "v/a", "v/b"]  # in key order
        assert [i.size for i in versions if i.key == "v/a" and i.current] == [3]
        old = [i for i in versions if not i.current]
        assert sorted(i.size for i in old) == [1, 2] and keys(old) == ["v/a", "v/a"]
        assert len({i.generation for i in versions}) == 4

        # a deleted object of a versioned bucket stays as a noncurrent revision (S3's
        # delete marker is not an object and is not listed)
        (b,) = [i for i in versions if i.key == "v/b"]
        assert store.delete_many(bucket, [b]) == {}
        assert store.stat(bucket, "v/b") is None
        after = list(store.list_versions(bucket, "v/"))
        assert [(i.key, i.current) for i in after if i.key == "v/b"] == [("v/b", False)]

        traits.requires("delete_versions")
        old = [i for i in after if not i.current]
        assert store.delete_many(bucket, old, versions=True) == {}
        left = list(store.list_versions(bucket, "v/"))
        assert [(i.key, i.size, i.current) for i in left] == [("v/a", 3, True)]
        assert store.read_range(bucket, "v/a", 0, 10) == b"333"
        assert keys(store.list_versions(bucket, "v1/")) == ["v1/x"]
        assert store.delete_many(bucket, old, versions=True) == {}  # gone: success
