"""Records: the model's value classes, defined the way frozen dataclasses are, at a fraction of the cost.

``@record`` turns an annotated class into a record: an ``__init__`` taking its fields (with
defaults and ``field(default_factory=...)``), equality and hashing over its compared fields, a
``repr``, ``__match_args__``, and — unless ``@record(frozen=False)`` — immutability
(assignment raises :class:`FrozenRecordError`). :func:`replace`, :func:`fields` and
:func:`is_record` are the ``dataclasses`` functions of the same names for records. Type
checkers treat a record as a dataclass (``dataclass_transform``).

Why not ``dataclasses``: on Python 3.11 importing it imports ``inspect`` (and through it ``ast``,
``dis``, ``tokenize``), and each class compiles four to six methods while its module is imported.
For the 35 classes a ``gputui snapshot --json`` defines, that was ~25 ms of an ~80 ms run, more than
anything else it imports. A record compiles ``__init__``, ``__eq__`` and ``__hash__`` from its field
names too, but each only on its first call: defining a class costs nothing, and a one-shot compiles
the few methods it uses. ``__repr__`` is shared (repr is never on a hot path).

A frozen record's ``__init__`` sets fields with ``object.__setattr__`` bound once (a frozen
dataclass looks it up for every field), never through ``__dict__``: the instance keeps its inline
values, the cheapest to read. Except a wide record (``DICT_FIELDS`` fields or more: a GPU, a process
row, a container, a snapshot), which a churning poll rebuilds by the dozen: its ``__init__`` stores each field
into the instance's ``__dict__`` (``object.__setattr__`` is a wrapper call building two argument
tuples, several times the cost of the store) and ``replace`` copies the old instance's dict in one
``update``. Every instance of a class is built the same way, so the interpreter's specialised
attribute reads of that class stay specialised (a mix of dict and dict-less instances would miss).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

__all__ = ["FrozenRecordError", "Field", "field", "fields", "is_record", "record", "replace"]

_T = TypeVar("_T")
_F = TypeVar("_F")

if TYPE_CHECKING:  # typing has it from 3.11 only, and typing_extensions costs a start 4-8 ms
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Callable[[_F], _F]:
        return lambda fn: fn


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
#: the default of a parameter whose field has a default factory: "call the factory"
_FACTORY: Any = _Missing()


class FrozenRecordError(AttributeError):
    """Assignment to a field of a frozen record."""


class Field:
    """One field of a record: its name, its annotation (a string) and how it takes part."""

    __slots__ = ("name", "type", "default", "default_factory", "repr", "compare", "hash")

    def __init__(self, default: Any, default_factory: Any, repr: bool, compare: bool, hash: bool | None) -> None:
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.compare = compare
        self.hash = hash

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, type={self.type!r}, default={self.default!r})"


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING, repr: bool = True,
          compare: bool = True, hash: bool | None = None) -> Any:
    """A field with a default factory, or one left out of repr, comparison or hashing."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("a field cannot have both a default and a default_factory")
    return Field(default, default_factory, repr, compare, hash)


# -- the decorator --------------------------------------------------------------------------


@overload
def record(cls: type[_T], /) -> type[_T]: ...
@overload
def record(*, frozen: bool = True) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[_T] | None = None, /, *, frozen: bool = True) -> Any:
    """Make ``cls`` a record (frozen unless ``frozen=False``)."""
    if cls is None:
        return lambda c: _make(c, frozen)
    return _make(cls, frozen)


def _make(cls: Any, frozen: bool) -> Any:
    own = cls.__dict__.get("__annotations__", {})
    found: list[Field] = []
    for base in reversed(cls.__mro__[1:]):  # a record's fields come after its record bases'
        found.extend(getattr(base, "__record_fields__", ()))
    by_name = {f.name: f for f in found}
    for name, annotation in own.items():
        if "ClassVar" in str(annotation):
            continue
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, Field) else Field(value, MISSING, True, True, None)
        f.name, f.type = name, annotation
        if f.default is not MISSING and type(f.default).__hash__ is None:
            raise ValueError(f"{cls.__qualname__}.{name}: mutable default {type(f.default).__name__} "
                             "is shared by every instance; use field(default_factory=...)")
        if isinstance(value, Field):  # the class keeps the plain default, as a dataclass does
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        by_name[name] = f
    all_fields = tuple(by_name.values())
    seen_default = False
    for f in all_fields:
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if seen_default and not has_default:
            raise TypeError(f"{cls.__qualname__}: field {f.name!r} without a default follows one with a default")
        seen_default = seen_default or has_default

    compared = tuple(f.name for f in all_fields if f.compare)
    hashed = tuple(f.name for f in all_fields if (f.compare if f.hash is None else f.hash))
    cls.__record_fields__ = all_fields
    cls.__record_names__ = names = frozenset(by_name)
    type.__setattr__(cls, "__match_args__", tuple(f.name for f in all_fields))  # what `case Cls(a, b)` matches
    cls.__init__ = _lazy(cls, "__init__", lambda: _init_source(all_fields, frozen))
    cls.__record_replace__ = _lazy(cls, "__record_replace__", lambda: _replace_source(all_fields))
    if "__repr__" not in cls.__dict__:
        cls.__repr__ = _repr_of(tuple(f.name for f in all_fields if f.repr))
    if "__eq__" not in cls.__dict__:
        cls.__eq__ = _lazy(cls, "__eq__", lambda: _eq_source(compared))
    if frozen:
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            cls.__hash__ = _lazy(cls, "__hash__", lambda: _hash_source(hashed))
        cls.__setattr__, cls.__delattr__ = _frozen(cls, names)
    elif "__hash__" not in cls.__dict__:
        cls.__hash__ = None  # mutable and compared by value: unhashable, as a dataclass is
    return cls


def _repr_of(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({inner})"
    return __repr__


def _frozen(cls: type, names: frozenset[str]) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    """``__setattr__`` and ``__delattr__`` refusing the fields (and, on the record class itself, any name)."""
    def refuse(self: Any, name: str, verb: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenRecordError(f"cannot {verb} field {name!r} of a frozen {cls.__qualname__}")

    def __setattr__(self: Any, name: str, value: Any) -> None:
        refuse(self, name, "assign to")
        object.__setattr__(self, name, value)

    def __delattr__(self: Any, name: str) -> None:
        refuse(self, name, "delete")
        object.__delattr__(self, name)
    return __setattr__, __delattr__


def _lazy(cls: Any, name: str, build: Callable[[], tuple[str, dict[str, Any]]]) -> Any:
    """A method that, on its first call, compiles the real one from ``build()`` (its source and the
    names that source uses), puts it on the class in its own place and hands over to it. So a record
    class costs nothing to define, and each method is compiled at most once, when first needed."""
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        source, env = build()
        namespace: dict[str, Any] = {}
        exec(source, env, namespace)  # source built from the class's own field names
        real = namespace[name]
        real.__qualname__ = f"{cls.__qualname__}.{name}"
        real.__module__ = cls.__module__
        setattr(cls, name, real)  # type.__setattr__: the class itself is never frozen
        return real(self, *args, **kwargs)
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    return method


#: a frozen record class with this many fields or more is built through its instances' dicts (measured on
#: a churning 8 x 64 poll, benchmarks/profile_poll.py --cachegrind --churn: a quarter fewer instructions,
#: while the narrow records read every poll keep their inline values: fewer cache misses than all dicts).
#: 16 takes in the snapshot (16 fields, built three times a poll: ~40,000 fewer instructions a poll, still
#: or churning, and no more cache misses); the next narrower record is a process's facts (14)
DICT_FIELDS = 16


def _init_source(fs: tuple[Field, ...], frozen: bool) -> tuple[str, dict[str, Any]]:
    """``__init__``. A frozen record's sets each field with ``object.__setattr__`` (bound once, as a
    global of the function), keeping the instance's inline values; a wide one's (``DICT_FIELDS``)
    stores each into the instance's ``__dict__`` (a subscript store, no call), as its ``replace``
    copies do; a mutable one's assigns plainly."""
    wide = frozen and len(fs) >= DICT_FIELDS
    env: dict[str, Any] = {"_FACTORY": _FACTORY, "_set": object.__setattr__}
    params, body = ["self"], ["    d = self.__dict__"] if wide else []
    for i, f in enumerate(fs):
        value = f.name
        if f.default_factory is not MISSING:
            env[f"_f{i}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            value = f"_f{i}() if {f.name} is _FACTORY else {f.name}"
        elif f.default is not MISSING:
            env[f"_d{i}"] = f.default
            params.append(f"{f.name}=_d{i}")
        else:
            params.append(f.name)
        body.append(f"    d[{f.name!r}] = {value}" if wide else f"    _set(self, {f.name!r}, {value})" if frozen
                    else f"    self.{f.name} = {value}")
    return f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n", env


def _replace_source(fs: tuple[Field, ...]) -> tuple[str, dict[str, Any]]:
    """``__record_replace__(self, changes)``: a new instance with each field from ``changes`` or
    ``self``, set as ``__init__`` sets it (no ``__init__`` call: no default factory runs); for a wide
    record, the old instance's dict copied in one ``dict.update``, then the changes."""
    if len(fs) < DICT_FIELDS:
        body = "".join(f"    _set(new, {f.name!r}, changes[{f.name!r}] if {f.name!r} in changes else self.{f.name})\n"
                       for f in fs)
        return ("def __record_replace__(self, changes):\n    new = _new(self.__class__)\n" + body + "    return new\n",
                {"_set": object.__setattr__, "_new": object.__new__})
    names = repr(tuple(f.name for f in fs))
    return ("def __record_replace__(self, changes):\n    new = _new(self.__class__)\n    d = new.__dict__\n"
            "    old = self.__dict__\n"
            f"    if len(old) == {len(fs)}:\n        d.update(old)\n"
            f"    else:\n        for n in {names}:\n            d[n] = getattr(self, n)\n"
            "    d.update(changes)\n    return new\n",
            {"_new": object.__new__})


def _eq_source(names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    mine = "".join(f"self.{n}," for n in names)
    theirs = "".join(f"other.{n}," for n in names)
    return ("def __eq__(self, other):\n"
            "    if other.__class__ is not self.__class__:\n"
            "        return NotImplemented\n"
            f"    return ({mine}) == ({theirs})\n"), {}


def _hash_source(names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    return f"def __hash__(self):\n    return hash(({''.join(f'self.{n},' for n in names)}))\n", {}


# -- the dataclasses functions, for records ----------------------------------------------------


def is_record(obj: Any) -> bool:
    """True for a record class or an instance of one."""
    cls = obj if isinstance(obj, type) else type(obj)
    return hasattr(cls, "__record_fields__")


def fields(obj: Any) -> tuple[Field, ...]:
    """A record's (or record class's) fields, in ``__init__`` order."""
    try:
        cls: Any = obj if isinstance(obj, type) else type(obj)
        found: tuple[Field, ...] = cls.__record_fields__
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None
    return found


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of ``obj`` with some fields changed (``dataclasses.replace`` for records).

    Records have no ``__post_init__`` and every field is an ``__init__`` argument, so the copy is
    the instance's fields with the changes applied: no ``__init__`` call, no default factory run,
    and nothing else of the instance (a cached property's value) carried over."""
    cls: Any = type(obj)
    try:
        names: frozenset[str] = cls.__record_names__
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None
    if not names.issuperset(changes):
        raise TypeError(f"{cls.__qualname__} has no field {sorted(changes.keys() - names)[0]!r}")
    new: _T = cls.__record_replace__(obj, changes)
    return new
