"""storage.remap.matching: names of both sides of a re-import joined by name."""

from __future__ import annotations

from storage.remap.matching import Counted, is_prefix, match, match_lists, name_table

OLD = [["a", "b", "c"], ["d", "e"]]


def table(parts: list[list[str]]):  # type: ignore[no-untyped-def]
    return name_table(lambda part: parts[part], len(parts))


def test_every_kept_name_moves_from_its_old_place_to_its_new_one() -> None:
    new = [["e", "x", "a"], ["c", "d", "y"]]  # b gone; x, y new; a, c, d, e moved
    moves, counted = match(table(OLD), table(new))
    pairs = sorted(
        zip(
            moves.old_part.tolist(),
            moves.old_offset.tolist(),
            moves.new_part.tolist(),
            moves.new_offset.tolist(),
            strict=True,
        )
    )
    assert pairs == [(0, 0, 0, 2), (0, 2, 1, 0), (1, 0, 1, 1), (1, 1, 0, 0)]
    assert counted == Counted(kept=4, new=2, dropped=1) and counted.total == 6


def test_old_names_first_in_every_partition_is_an_append() -> None:
    assert is_prefix(table(OLD), table([["a", "b", "c", "z"], ["d", "e"]]))
    assert is_prefix(table(OLD), table(OLD))
    assert not is_prefix(table(OLD), table([["b", "a", "c"], ["d", "e"]]))  # reshuffled
    assert not is_prefix(table(OLD), table([["a", "b"], ["c", "d", "e"]]))  # moved across partitions
    assert not is_prefix(table(OLD), table([["a", "b", "c", "d", "e"]]))  # another partition count


def test_short_lists_match_by_name() -> None:
    index, counted = match_lists(["likes", "follows", "blocks"], ["follows", "buys", "likes"])
    assert index.tolist() == [1, -1, 0] and counted == Counted(kept=2, new=1, dropped=1)
