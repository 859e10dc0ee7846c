"""Operations on the py-runtime interpreter's abstract values (`liftgate.detect.pyvalues.AV`).

Truth and comparison across capability lanes, ``and``/``or`` with short-circuiting, indexing
and slicing, iteration and comprehension results, and the join of the variables that branches
leave behind. Everything here works on values only: no syntax tree, no interpreter state.
"""

from __future__ import annotations

import itertools

from liftgate.detect.pyvalues import (
    AV,
    MAX_SET,
    TOP,
    TOP_SET,
    ArchList,
    Cap,
    ClassRef,
    DictObj,
    FuncRef,
    Opaque,
    PartialRef,
    Truth3,
    Unsupported,
    combine,
    const,
    freeze,
    is_marker,
    join,
    lane_count,
    lift,
    normalize,
    per_capability,
    safe_compare,
    truth_lanes,
    truthiness,
)
from liftgate.model import Evidence

MAX_LOOP_ITEMS = 64  # elements of a concrete iterable followed one by one (loops, comprehensions, range)


def item_at(value: object, index: int) -> object:
    frozen = freeze(value)
    if isinstance(frozen, tuple):
        return frozen[index]
    raise TypeError("not a sequence")


def raise_type_error() -> object:
    raise TypeError


def format_value(value: object) -> str:
    if isinstance(value, (int, float, bool)) or value is None:
        return str(value)
    raise Unsupported("format")


def is_unknown(value: AV) -> bool:
    """A fact the detector cannot pin down: not one definite value (``is_MI300()`` → True or False)."""
    if not value.uniform or len(value.sets[0]) != 1:
        return True
    return any(
        is_marker(x) or (isinstance(x, Opaque) and not isinstance(x, (FuncRef, PartialRef, ClassRef)))
        for s in value.sets
        for x in s
    )


def elements_of(value: AV) -> list[object]:
    """Every value any lane holds, once each, in lane order."""
    if len(value.sets) == 1:
        return list(value.sets[0])
    return list(dict.fromkeys(itertools.chain.from_iterable(value.sets)))


def only_plain(value: AV) -> AV:
    sets = [frozenset(x for x in s if not isinstance(x, Opaque)) for s in value.sets]
    return AV(normalize(sets), value.inferred, value.trail, value.deps)


def all_dicts(value: AV) -> bool:
    return all(isinstance(x, DictObj) for x in elements_of(value))


def subscript(container: object, index: object) -> object:
    if isinstance(container, (tuple, str)):
        if isinstance(index, slice):
            if not all(isinstance(b, (int, type(None))) for b in (index.start, index.stop)):
                raise Unsupported("slice")
        elif not isinstance(index, int) or isinstance(index, bool):
            raise Unsupported("index")
        result = container[index]
        return (
            Cap(result)
            if isinstance(container, Cap) and isinstance(index, slice) and len(result) == 2
            else result
        )
    raise Unsupported("subscript")


def not_value(value: AV) -> AV:
    def negate(v: object) -> object:
        t = truthiness(v)
        if t is None:
            raise Unsupported("not")
        return not t

    return lift(negate, value)


def compare(op: str, left: AV, right: AV) -> AV:
    if op == "In" and any(isinstance(x, ArchList) for x in elements_of(right)):
        return _arch_list_contains(left, right)
    if op == "NotIn" and any(isinstance(x, ArchList) for x in elements_of(right)):
        return not_value(_arch_list_contains(left, right))
    return lift(lambda a, b: safe_compare(op, a, b), left, right)


def _arch_list_contains(item: AV, container: AV) -> AV:
    """``"sm_90a" in torch.cuda.get_arch_list()`` read as "the device is a 9.0 device" (inferred)."""
    from liftgate.arch.parse import parse_arch

    names = set()
    for x in elements_of(item):
        if isinstance(x, str):
            try:
                names.add(parse_arch(x).cc)
            except ValueError:
                return TOP
    if not names:
        return TOP
    value = per_capability(
        lambda cc: (cc in names,),
        Evidence(
            f"torch.cuda.get_arch_list() read as the device's own arch ({', '.join(sorted(str(n) for n in names))})"
        ),
        inferred=True,
    )
    return combine([item, container, value], list(value.sets))


def and_values(values: list[AV]) -> AV:
    return _short_circuit(values, stop_when=False)


def or_values(values: list[AV]) -> AV:
    return _short_circuit(values, stop_when=True)


def _short_circuit(values: list[AV], stop_when: bool) -> AV:
    n = 1 if all(v.uniform for v in values) else lane_count()
    sets = []
    for i in range(n):
        out: set[object] = set()
        for index, value in enumerate(values):
            lane = value.lane(i)
            last = index == len(values) - 1
            continuing = False
            for x in lane:
                t = truthiness(x)
                if last:
                    out.add(x)
                elif t is None:
                    out.add(x)
                    continuing = True
                elif t is stop_when:
                    out.add(x)
                else:
                    continuing = True
            if not continuing:
                break
        sets.append(frozenset(out) if len(out) <= MAX_SET else TOP_SET)
    return combine(values, sets)


def reorder_trail(outer: tuple[Evidence, ...], inner: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
    out: dict[Evidence, None] = {}
    for step in (*outer, *inner):
        out.setdefault(step, None)
    return tuple(out)[:16]


def merge_envs(before: dict[str, AV], branches: list[dict[str, AV]]) -> dict[str, AV]:
    """Join the branches' variables. Branches start as copies of ``before``, so a variable no branch
    touched is the same object everywhere and costs an identity test, not a join."""
    if not branches:
        return dict(before)
    merged = dict(branches[0])
    for other in branches[1:]:
        for name, value in other.items():
            current = merged.get(name)
            if current is value:
                continue
            merged[name] = value if current is None else join([current, value])
    _drop_partial_attributes(merged, branches)
    return merged


def _drop_partial_attributes(merged: dict[str, AV], branches: list[dict[str, AV]]) -> None:
    """An attribute (``obj.x``, keyed with its dot) set on some paths only is, on the others, whatever
    it was: the value one branch gave it is not the value after the ``if`` (``if moe.flag is None:
    moe.flag = False`` does not make ``moe.flag`` False), so it is read from the object again."""
    for name in [n for n in merged if "." in n]:
        if any(name not in branch for branch in branches):
            del merged[name]


def merge_by_truth(
    before: dict[str, AV], body: dict[str, AV] | None, orelse: dict[str, AV] | None, truths: list[str]
) -> dict[str, AV]:
    """The variables after an ``if`` whose test differs between devices, lane by lane: a lane where
    the test is certainly true continues from the body, one where it is certainly false from the
    else branch, and only an undecided lane joins the two. ``x = False; if is_sm90(): x = True``
    leaves ``x`` true exactly on 9.0, not "true or false everywhere". A branch that ends in
    ``return``/``raise`` (None here) does not continue."""
    if body is None and orelse is None:
        return dict(before)
    if body is None or orelse is None:
        return dict(body if body is not None else orelse)  # type: ignore[arg-type]
    merged = dict(body)
    _drop_partial_attributes(merged, [body, orelse])
    names = set(merged) | {n for n in orelse if "." not in n}
    for name in sorted(names):
        a, b = body.get(name), orelse.get(name)
        if a is b:
            continue
        if a is None or b is None:
            merged[name] = a if a is not None else b  # type: ignore[assignment]
            continue
        sets: list[frozenset[object]] = []
        for i, truth in enumerate(truths):
            if truth == Truth3.TRUE:
                sets.append(a.lane(i))
            elif truth == Truth3.FALSE:
                sets.append(b.lane(i))
            else:
                union = a.lane(i) | b.lane(i)
                sets.append(union if len(union) <= MAX_SET else TOP_SET)
        merged[name] = combine([a, b], sets)
    return merged


def reached(value: AV, guards: list[tuple[AV, str]]) -> AV:
    """``value`` on the lanes that can reach the point where it is produced: a lane on which a guard of
    the current path is certainly false gets no value (an attribute assigned inside ``if is_sm100():``
    is not assigned on 9.0)."""
    arch_guards = [g for g, _ in guards if g.arch]
    if not arch_guards:
        return value
    blocked = [False] * lane_count()
    for guard in arch_guards:
        for i, truth in enumerate(truth_lanes(guard)):
            if truth == Truth3.FALSE:
                blocked[i] = True
    if not any(blocked):
        return value
    sets = [frozenset() if blocked[i] else value.lane(i) for i in range(lane_count())]
    return combine([value, *arch_guards], sets)


def iterate(value: AV) -> AV | None:
    """The join of the elements of a concrete iterable (per lane), or None."""
    n = 1 if value.uniform else lane_count()
    sets = []
    for i in range(n):
        out: set[object] = set()
        for x in value.lane(i):
            if isinstance(x, (tuple, frozenset, str)) and len(x) <= MAX_LOOP_ITEMS:
                out.update(x)
            else:
                return None
        sets.append(frozenset(out))
    return combine([value], sets)


def concrete_items(value: AV) -> list[AV] | None:
    if not value.uniform or len(value.sets[0]) != 1:
        return None
    (x,) = value.sets[0]
    if isinstance(x, (tuple, frozenset)) and len(x) <= MAX_LOOP_ITEMS:
        return [AV((frozenset({item}),), value.inferred, value.trail) for item in x]
    return None


_SKIP = object()


def filtered(element: AV, tests: list[AV]) -> AV:
    if not tests:
        return element
    test = and_values(tests) if len(tests) > 1 else tests[0]
    truths = truth_lanes(test)
    sets = []
    for i, t in enumerate(truths):
        if t == Truth3.TRUE:
            sets.append(element.lane(i))
        elif t == Truth3.FALSE:
            sets.append(frozenset({_SKIP}))
        else:
            sets.append(element.lane(i) | {_SKIP})
    return combine([element, test], sets)


def collect(items: list[AV], as_set: bool) -> AV:
    """A comprehension's result per lane: every combination of (possibly filtered) elements."""

    def build(*xs: object) -> object:
        kept = tuple(x for x in xs if x is not _SKIP)
        return frozenset(kept) if as_set else kept

    if not items:
        return const(frozenset() if as_set else ())
    return lift(build, *items)
