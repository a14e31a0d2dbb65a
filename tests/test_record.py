"""Records (gputui/core/record.py): the model's value classes behave as frozen dataclasses did —
equality, hashing, immutability, defaults, replace — so swapping the mechanism changed nothing a caller sees."""

from __future__ import annotations

import pickle
from functools import cached_property

import pytest

from gputui.core.model import Gpu, RawProcess
from gputui.core.record import DICT_FIELDS, FrozenRecordError, field, fields, is_record, record, replace


@record
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    note: str = field(default="", compare=False, repr=False)

    @cached_property
    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


@record(frozen=False)
class Counter:
    name: str
    count: int = 0


@record
class Pair:
    a: int
    b: int
    label: str = field(default="", compare=False)


@record
class OtherPair:
    a: int
    b: int
    label: str = field(default="", compare=False)


def test_a_record_is_built_from_positional_and_keyword_arguments_with_defaults() -> None:
    p = Point(1, y=2)
    assert (p.x, p.y, p.tags, p.note) == (1, 2, [], "")
    assert Point(3).y == 0


def test_each_instance_gets_its_own_default_from_a_factory() -> None:
    a, b = Point(1), Point(1)
    a.tags.append("a")
    assert b.tags == []


def test_a_missing_or_unknown_argument_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="'x'"):
        Point()  # type: ignore[call-arg]  # the missing argument is the point of the test
    with pytest.raises(TypeError, match="'z'"):
        Point(1, z=2)  # type: ignore[call-arg]  # the unknown argument is the point of the test


def test_a_frozen_record_refuses_assignment_and_deletion() -> None:
    p = Point(1)
    with pytest.raises(FrozenRecordError, match="'x'"):
        p.x = 2  # type: ignore[misc]  # assigning to a frozen record is the point of the test
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]  # deleting from a frozen record is the point of the test
    assert p.x == 1


def test_records_are_equal_and_hash_alike_by_value_within_one_class() -> None:
    assert Pair(1, 2) == Pair(1, 2)
    assert hash(Pair(1, 2, "a")) == hash(Pair(1, 2, "b"))  # label is not compared
    assert Pair(1, 2, "a") == Pair(1, 2, "b")
    assert Pair(1, 2) != Pair(2, 1)
    assert Pair(1, 2) != OtherPair(1, 2)  # same fields, another class
    assert len({Pair(1, 2), Pair(1, 2), Pair(2, 2)}) == 2
    with pytest.raises(TypeError):
        hash(Point(1))  # a list field makes it unhashable, as it would a frozen dataclass


def test_a_mutable_record_can_change_and_is_not_hashable() -> None:
    c = Counter("polls")
    c.count += 1
    assert c == Counter("polls", 1)
    with pytest.raises(TypeError):
        hash(c)


def test_repr_shows_the_fields_it_should() -> None:
    assert repr(Point(1, 2, note="secret")) == "Point(x=1, y=2, tags=[])"


def test_replace_copies_with_changes_and_drops_cached_values() -> None:
    p = Point(3, 4)
    assert p.norm == 7
    q = replace(p, y=10)
    assert (q.x, q.y) == (3, 10) and p.y == 4
    assert q.norm == 13  # not the cached 7 of the original
    with pytest.raises(TypeError, match="'z'"):
        replace(p, z=1)
    with pytest.raises(TypeError):
        replace(object())


def test_fields_and_is_record_describe_the_class() -> None:
    assert [f.name for f in fields(Point)] == ["x", "y", "tags", "note"]
    assert [f.type for f in fields(Point)][:2] == ["int", "int"]
    assert is_record(Point) and is_record(Point(1)) and not is_record(object())
    with pytest.raises(TypeError):
        fields(object())


def test_a_mutable_default_or_a_required_field_after_a_default_is_refused_at_definition() -> None:
    with pytest.raises(ValueError, match="default_factory"):
        @record
        class Bad:
            items: list[int] = []  # the mistake under test

    with pytest.raises(TypeError, match="'b'"):
        @record
        class Order:
            a: int = 0
            b: int  # type: ignore[misc]  # the mistake under test


def test_records_match_by_position_and_survive_pickling() -> None:
    match Point(1, 2):
        case Point(x, y):
            assert (x, y) == (1, 2)
        case _:
            pytest.fail("Point(1, 2) did not match Point(x, y)")
    p = Point(1, 2, ["a"])
    assert pickle.loads(pickle.dumps(p)) == p


def test_the_model_is_made_of_records() -> None:
    raw = RawProcess(pid=1, type="compute", gpu_memory=None)
    assert is_record(raw) and is_record(Gpu)
    with pytest.raises(FrozenRecordError):
        raw.pid = 2  # type: ignore[misc]  # the model is immutable: one poll, one snapshot


def test_no_module_of_gputui_uses_dataclasses() -> None:
    """One kind of value class: a module that imported dataclasses would put its import cost (and
    inspect's) back into every one-shot that reaches it, and two mechanisms would read differently."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "gputui"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "dataclasses" in names:
                offenders.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert not offenders, offenders


def _wide_class() -> type:
    """A record as wide as a process row (built through its instances' dicts: record.DICT_FIELDS)."""
    names = [f"f{i}" for i in range(DICT_FIELDS + 2)]
    body: dict[str, object] = {"__annotations__": {"head": "int", **{n: "int" for n in names}, "tags": "list[str]"},
                               **{n: i for i, n in enumerate(names)}, "tags": field(default_factory=list, hash=False),
                               "total": cached_property(lambda self: self.head + self.f0)}
    return record(type("Wide", (), body))


#: at module level: pickle finds a class by its module and name
Wide = _wide_class()


def test_a_wide_record_behaves_as_a_narrow_one() -> None:
    wide = Wide
    w = wide(5)
    assert (w.head, w.f0, w.f3, w.tags) == (5, 0, 3, []) and w.tags is not wide(5).tags
    with pytest.raises(FrozenRecordError):
        w.f1 = 9
    with pytest.raises(FrozenRecordError):
        del w.head
    assert w.total == 5
    v = replace(w, f0=10)
    assert (v.head, v.f0, v.f1, w.f0) == (5, 10, 1, 0) and v.tags is w.tags
    assert v.total == 15  # not the cached 5 of the original
    assert replace(v, f0=0) == w and hash(replace(v, f0=0)) == hash(w) and v != w
    assert pickle.loads(pickle.dumps(v)) == v
    with pytest.raises(TypeError, match="'nope'"):
        replace(w, nope=1)
