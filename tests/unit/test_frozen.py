"""``@frozen`` behaves as ``@dataclass(frozen=True)``: each check runs on twin classes defined both ways."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import InitVar, dataclass, field
from typing import Any, Callable

import pytest

from tfdist.frozen import frozen

Decorator = Callable[[type], type]
FROZEN_DATACLASS: Decorator = dataclass(frozen=True)


def _plain(decorate: Decorator) -> Any:
    @decorate
    class Thing:
        """A thing."""

        name: str
        size: int = 3
        tags: tuple[str, ...] = ()
        extra: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

        def twice(self) -> int:
            return self.size * 2

    return Thing


def _keyword_only(decorate: Decorator) -> Any:
    @decorate
    class Thing:
        a: int
        b: int = field(kw_only=True)
        c: int = 5
        seen: list[int] = field(default_factory=list, init=False)

        def __post_init__(self) -> None:
            self.seen.append(self.a + self.b + self.c)

        def __repr__(self) -> str:
            return "written by the class"

    return Thing


@frozen
class Pickled:
    """Module-level, so pickle can find it."""

    name: str
    size: int = 3


def _outcome(make: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", make())
    except TypeError as error:  # the message past the qualified name is compared
        return ("TypeError", str(error).rpartition("__init__()")[2])


@pytest.mark.parametrize("args, kwargs", [
    (("a",), {}),
    (("a", 4), {}),
    (("a", 4, ("x",)), {}),
    ((), {"name": "a", "tags": ("y",)}),
    (("a",), {"extra": {"k": 1}}),
    ((), {}),  # missing required argument
    (("a", 1, (), {}, 9), {}),  # too many positional arguments
    (("a",), {"name": "b"}),  # twice
    (("a",), {"colour": "red"}),  # unknown keyword
])
def test_constructor_repr_equality_and_hash_match_the_dataclass(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    ours, theirs = _plain(frozen), _plain(FROZEN_DATACLASS)
    mine, reference = _outcome(lambda: ours(*args, **kwargs)), _outcome(lambda: theirs(*args, **kwargs))
    assert mine[0] == reference[0]
    if mine[0] != "ok":
        assert mine[1] == reference[1]
        return
    a, b = mine[1], reference[1]
    assert repr(a) == repr(b)
    assert list(vars(a).items()) == list(vars(b).items())  # the same attributes, in the same order
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert a == ours(*args, **kwargs) and not a != ours(*args, **kwargs)
    assert hash(a) == hash(ours(*args, **kwargs)) == hash(b)
    assert (a == ours(a.name + "!")) is False
    assert a.twice() == b.twice()
    # compare=False fields are left out of == and hash, as in the dataclass
    assert a == dataclasses.replace(a, extra={"other": 2}) and b == dataclasses.replace(b, extra={"other": 2})


def test_instances_of_another_class_are_never_equal() -> None:
    ours, theirs = _plain(frozen), _plain(FROZEN_DATACLASS)
    assert ours("a") != theirs("a")
    assert (ours("a") == ("a", 3, ())) is False


def test_assignment_and_deletion_are_refused() -> None:
    thing = _plain(frozen)("a")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'size'"):
        thing.size = 5
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
        thing.other = 5
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'name'"):
        del thing.name
    assert thing.size == 3 and not hasattr(thing, "other")


def test_replace_fields_copy_and_pickle_work() -> None:
    ours = _plain(frozen)
    thing = ours("a", 4, ("t",), {"k": 1})
    assert dataclasses.is_dataclass(thing)
    assert [f.name for f in dataclasses.fields(thing)] == ["name", "size", "tags", "extra"]
    assert dataclasses.replace(thing, size=5) == ours("a", 5, ("t",))
    assert copy.deepcopy(thing) == thing and copy.copy(thing) == thing
    assert ours.__match_args__ == ("name", "size", "tags", "extra")
    assert pickle.loads(pickle.dumps(Pickled("p", 1))) == Pickled("p", 1)


def test_default_factories_run_per_instance() -> None:
    ours = _plain(frozen)
    first, second = ours("a"), ours("b")
    assert first.extra == {} and first.extra is not second.extra


def test_unhashable_fields_make_hash_fail_as_in_the_dataclass() -> None:
    def make(decorate: Decorator) -> Any:
        @decorate
        class Table:
            table: dict[str, int] = field(default_factory=dict)

        return Table

    for cls in (make(frozen), make(FROZEN_DATACLASS)):
        with pytest.raises(TypeError, match="unhashable"):
            hash(cls({"a": 1}))


def test_keyword_only_fields_post_init_and_the_class_own_methods() -> None:
    ours, theirs = _keyword_only(frozen), _keyword_only(FROZEN_DATACLASS)
    assert ours(1, 3, b=4).seen == theirs(1, 3, b=4).seen == [8]
    for args, kwargs in (((1, 3, 4), {}), ((1,), {}), ((1,), {"b": 2, "seen": []})):
        assert _outcome(lambda: ours(*args, **kwargs)) == _outcome(lambda: theirs(*args, **kwargs))
        assert _outcome(lambda: ours(*args, **kwargs))[0] == "TypeError"
    assert repr(ours(1, b=2)) == repr(theirs(1, b=2)) == "written by the class"


def test_an_undocumented_class_gets_its_signature_as_doc() -> None:
    def make(decorate: Decorator) -> Any:
        @decorate
        class Bare:
            name: str
            size: int = 3

        return Bare

    assert make(frozen).__doc__ == make(FROZEN_DATACLASS).__doc__ == "Bare(name: 'str', size: 'int' = 3)"


def test_init_vars_are_refused() -> None:
    with pytest.raises(TypeError, match="InitVar"):
        @frozen
        class Seeded:
            seed: InitVar[int] = 0
