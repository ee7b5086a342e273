"""Where models live in an object store, and when one counts as pushed.

A model version is a prefix (by default `models/{name}/{version}/`); it counts as pushed
when its ready marker (default `_SUCCESS`) lands there — never on each of its files.

>>> ObjectLayout().match("models/bert/3/_SUCCESS")
ModelPath(name='bert', version='3', prefix='models/bert/3/')
>>> ObjectLayout().match("models/bert/3/weights.bin") is None
True
"""

from __future__ import annotations

import re
from functools import cached_property

import msgspec

__all__ = ["ModelPath", "ObjectLayout", "file_name_refusal"]

_FIELD = re.compile(r"\{(name|version)\}")


def file_name_refusal(name: str) -> str | None:
    """Why `name` is not a plain file name in a model's prefix (the ready marker's, the
    signature's), or None: empty, a `/`, `.` or `..` (a name outside the prefix, or none),
    a NUL.

    >>> file_name_refusal("model.sig"), file_name_refusal("../model.sig")
    (None, "'../model.sig' must be a plain file name (no '/', not '.' or '..', no NUL)")
    """
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        return f"{name!r} must be a plain file name (no '/', not '.' or '..', no NUL)"
    return None


class ModelPath(msgspec.Struct, frozen=True):  # a Struct: cheaper to make than a dataclass
    name: str
    version: str
    prefix: str


class ObjectLayout(msgspec.Struct, frozen=True, dict=True):  # dict: its cached regex
    pattern: str = "models/{name}/{version}/"
    marker: str = "_SUCCESS"

    def __post_init__(self) -> None:
        fields = _FIELD.findall(self.pattern)
        if sorted(fields) != ["name", "version"] or not self.pattern.endswith("/"):
            raise ValueError(
                f"layout pattern {self.pattern!r} must contain {{name}} and {{version}} once "
                "each and end with '/'"
            )
        refused = file_name_refusal(self.marker)
        if refused:
            raise ValueError(f"ready marker {refused}")

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        parts = _FIELD.split(self.pattern)
        out = ""
        for i, part in enumerate(parts):
            out += f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part)
        return re.compile(f"^{out}")

    def model_of(self, key: str) -> ModelPath | None:
        """The model version a key belongs to (any file under its prefix)."""
        m = self._regex.match(key)
        if not m:
            return None
        return ModelPath(m["name"], m["version"], m.group(0))

    def match(self, key: str) -> ModelPath | None:
        """The model version whose ready marker `key` is, else None."""
        path = self.model_of(key)
        if path is None or key != path.prefix + self.marker:
            return None
        return path

    def prefix(self, name: str, version: str) -> str:
        return self.pattern.format(name=name, version=version)
