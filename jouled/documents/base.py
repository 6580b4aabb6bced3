"""The base of the wire documents: a dataclass over one JSON object, checked and serialised.

Each document is a dataclass over one JSON object. `parse` checks the object
and names the first bad field; `to_dict` gives back the same object: a field
absent from the parsed object stays absent, a field the class does not
declare is kept verbatim in `extra`, and values are the JSON values as read.
So a signed body parsed and serialised again has the same canonical bytes,
and a body that a newer daemon extended keeps its new fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Self

from jouled.errors import DocumentError


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@dataclass(frozen=True)
class _Field:
    name: str  # the attribute
    key: str  # the JSON key
    hint: Any
    required: bool
    null: bool  # None is written as null rather than left out
    default: Any  # an optional field's default (from its factory, if it has one)


@dataclass(kw_only=True)
class Document:
    """Base of the wire documents: parse from a JSON object, serialise back to the same one."""

    NAME: ClassVar[str] = "document"
    # Optional fields written as null when None; the others are left out when None.
    NULL: ClassVar[frozenset[str]] = frozenset()

    # Fields this class does not declare (and declared optional ones read as null),
    # kept as read so that serialising gives back the same object.
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # Declared optional fields the parsed object did not have: serialising leaves them
    # out while they keep their default.
    absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def parse(cls, data: object, *, where: str = "") -> Self:
        """The document `data` holds; DocumentError names the first bad field."""
        return cls._parse(data, where or cls.NAME, "")

    @classmethod
    def _parse(cls, data: object, document: str, prefix: str) -> Self:
        if not isinstance(data, Mapping):
            raise DocumentError(
                f"must be a JSON object, not {_json_type(data)}",
                document=document,
                field=prefix.removesuffix("."),
            )
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        absent: set[str] = set()
        specs = _fields(cls)
        for spec in specs:
            path = prefix + spec.key
            if spec.key not in data:
                if spec.required:
                    raise DocumentError("is missing", document=document, field=path)
                absent.add(spec.key)
                continue
            value = data[spec.key]
            if value is None and not spec.required and not spec.null:
                extra[spec.key] = None  # kept as read; the typed field stays None
                continue
            values[spec.name] = _check(value, spec.hint, document, path)
        known = {s.key for s in specs}
        extra.update((k, v) for k, v in data.items() if k not in known)
        return cls(**values, extra=extra, absent=frozenset(absent))

    def set(self, key: str, value: Any) -> None:
        """Set a field by its JSON key: a declared one by attribute, any other in `extra`."""
        for spec in _fields(type(self)):
            if spec.key == key:
                setattr(self, spec.name, value)
                self.extra.pop(key, None)
                return
        self.extra[key] = value

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the parsed one again, or the one the daemon signs or sends."""
        out: dict[str, Any] = {}
        for spec in _fields(type(self)):
            value = getattr(self, spec.name)
            if spec.key in self.absent and value == spec.default:
                continue
            if value is None and not spec.required and not spec.null:
                continue
            out[spec.key] = _dump(value)
        out.update(self.extra)
        return out


_FIELDS: dict[type[Document], tuple[_Field, ...]] = {}


def _fields(cls: type[Document]) -> tuple[_Field, ...]:
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "absent") or not f.init:
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None if f.default is dataclasses.MISSING else f.default
        out.append(
            _Field(
                name=f.name,
                key=f.metadata.get("key", f.name),
                hint=hints[f.name],
                required=required,
                null=f.name in cls.NULL,
                default=default,
            )
        )
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if hint in (int, float):
        return "a number"
    if hint is str:
        return "a string"
    if hint is bool:
        return "a boolean"
    if origin is list:
        return "an array"
    if origin is dict or typing.is_typeddict(hint) or hint is dict:
        return "an object"
    if isinstance(hint, type) and issubclass(hint, Document):
        return "an object"
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return "a string"
    return str(hint)


def _check(value: Any, hint: Any, document: str, path: str) -> Any:
    """`value` checked against `hint`: enums and nested documents built, the rest as read."""

    def wrong() -> DocumentError:
        return DocumentError(
            f"must be {_describe(hint)}, not {_json_type(value)}", document=document, field=path
        )

    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise wrong()
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            return _check(value, others[0], document, path)
        for option in others:
            try:
                return _check(value, option, document, path)
            except DocumentError:
                continue
        raise wrong()
    if origin is list:
        if not isinstance(value, list):
            raise wrong()
        (item,) = typing.get_args(hint)
        return [_check(v, item, document, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise wrong()
        args = typing.get_args(hint)
        if not args or args[1] is Any:
            return value
        return {k: _check(v, args[1], document, f"{path}.{k}") for k, v in value.items()}
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            raise wrong()
        missing = sorted(hint.__required_keys__ - value.keys())
        if missing:
            raise DocumentError("is missing", document=document, field=f"{path}.{missing[0]}")
        hints = typing.get_type_hints(hint)
        for key, item in value.items():
            if key in hints:
                _check(item, hints[key], document, f"{path}.{key}")
        return value
    if isinstance(hint, type) and issubclass(hint, Document):
        return hint._parse(value, document, f"{path}.")
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        if not isinstance(value, str) or value not in hint._value2member_map_:
            raise DocumentError(
                f"{value!r} is not one of {', '.join(m.value for m in hint)}",
                document=document,
                field=path,
                hint="the document was written by a newer jouled; upgrade this one",
            )
        return hint(value)
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"documents cannot check {hint!r}")
    if not ok:
        raise wrong()
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Document):
        return value.to_dict()
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value
