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
anything else it imports. A record compiles one function, its ``__init__``, and only when the class
is first instantiated; equality, hashing and repr are shared functions over an ``attrgetter``.

The generated ``__init__`` stores straight into the instance's ``__dict__`` (a frozen dataclass
calls ``object.__setattr__`` once a field), so building a record is also cheaper than building the
dataclass was: a poll builds a few hundred.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
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

    @property
    def init(self) -> bool:  # every field is an __init__ argument (as dataclasses' Field.init says)
        return True

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
    cls.__record_names__ = frozenset(by_name)
    cls.__record_frozen__ = frozen
    type.__setattr__(cls, "__match_args__", tuple(f.name for f in all_fields))  # what `case Cls(a, b)` matches
    cls.__init__ = _lazy_init(cls)
    if "__repr__" not in cls.__dict__:
        cls.__repr__ = _repr_of(tuple(f.name for f in all_fields if f.repr))
    if "__eq__" not in cls.__dict__:
        cls.__eq__ = _eq_of(_key(compared))
    if frozen:
        if "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
            cls.__hash__ = _hash_of(_key(hashed))
        names = frozenset(by_name)
        cls.__setattr__ = _frozen_setattr(cls, names)
        cls.__delattr__ = _frozen_delattr(cls, names)
    elif "__hash__" not in cls.__dict__:
        cls.__hash__ = None  # mutable and compared by value: unhashable, as a dataclass is
    return cls


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of an instance's values for ``names`` (attrgetter returns a bare value for one name)."""
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)


def _repr_of(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({inner})"
    return __repr__


def _eq_of(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return key(self) == key(other)
    return __eq__


def _hash_of(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))
    return __hash__


def _frozen_setattr(cls: type, names: frozenset[str]) -> Callable[[Any, str, Any], None]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenRecordError(f"cannot assign to field {name!r} of a frozen {cls.__qualname__}")
        object.__setattr__(self, name, value)
    return __setattr__


def _frozen_delattr(cls: type, names: frozenset[str]) -> Callable[[Any, str], None]:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenRecordError(f"cannot delete field {name!r} of a frozen {cls.__qualname__}")
        object.__delattr__(self, name)
    return __delattr__


def _lazy_init(cls: Any) -> Callable[..., None]:
    """An ``__init__`` that compiles the real one on the class's first instantiation and hands over to it."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real = _compile_init(cls)
        cls.__init__ = real  # type.__setattr__: the class itself is never frozen
        real(self, *args, **kwargs)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _compile_init(cls: Any) -> Callable[..., None]:
    fs: tuple[Field, ...] = cls.__record_fields__
    env: dict[str, Any] = {"_FACTORY": _FACTORY}
    params, body = ["self"], ["    d = self.__dict__"]
    for i, f in enumerate(fs):
        if f.default_factory is not MISSING:
            env[f"_f{i}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(f"    d[{f.name!r}] = _f{i}() if {f.name} is _FACTORY else {f.name}")
            continue
        if f.default is not MISSING:
            env[f"_d{i}"] = f.default
            params.append(f"{f.name}=_d{i}")
        else:
            params.append(f.name)
        body.append(f"    d[{f.name!r}] = {f.name}")
    source = f"def __init__({', '.join(params)}):\n" + "\n".join(body) + "\n"
    namespace: dict[str, Any] = {}
    exec(source, env, namespace)  # noqa: S102 (source built from the class's own field names)
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


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
    the instance's fields with the changes applied: no ``__init__`` call, no default factory run.
    Anything else in the instance's ``__dict__`` (a cached property) is not carried over."""
    cls: Any = type(obj)
    try:
        names: frozenset[str] = cls.__record_names__
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None
    if not names.issuperset(changes):
        raise TypeError(f"{cls.__qualname__} has no field {sorted(changes.keys() - names)[0]!r}")
    new: _T = object.__new__(cls)
    state, old = new.__dict__, obj.__dict__
    if len(old) == len(names):
        state.update(old)
    else:
        state.update({name: old[name] for name in names})
    state.update(changes)
    return new
