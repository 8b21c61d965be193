"""The vectorized ``%.9f`` formatter must produce exactly Python's (PBG's) text."""

from __future__ import annotations

import io

import numpy as np
import pytest

from storage.exporting.text import format_rows, format_rows_slow, write_blocks


def python_text(keys: list[str], values: np.ndarray) -> bytes:
    """PBG's own expression, value by value: ``"%.9f" % x`` for every float32 element."""
    return "".join(
        key + "\t" + "\t".join("%.9f" % float(x) for x in row) + "\n" for key, row in zip(keys, values, strict=True)
    ).encode("utf-8")


def test_hand_computed_values() -> None:
    values = np.array(
        [
            [0.1, -0.0, 1e-10, -5e-10],
            [1 / 1024, 3 / 1024, 123456.789, 2.0**32],
            [-7.25, 9.999999999, 1.5e-45, -(2.0**33 - 1024)],
        ],
        dtype=np.float32,
    )
    text = format_rows(["a", "bb", "ccc"], values).decode()
    assert text.splitlines() == [
        # 0.1f = 0.100000001490116...; -0.0 and tiny negatives keep their sign, as printf does.
        "a\t0.100000001\t-0.000000000\t0.000000000\t-0.000000000",
        # 1/1024 = 0.0009765625 and 3/1024 = 0.0029296875 are exact ties: round half to even.
        "bb\t0.000976562\t0.002929688\t123456.789062500\t4294967296.000000000",
        # 9.999999999 rounds to the float32 10.0; the subnormal 1.4e-45 prints as zero.
        "ccc\t-7.250000000\t10.000000000\t0.000000000\t-8589933568.000000000",
    ]


@pytest.mark.parametrize("scale", [1e-6, 0.3, 1.0, 1e3, 1e8])
def test_random_normal_values_match_python(scale: float) -> None:
    rng = np.random.default_rng(7)
    values = (rng.standard_normal((300, 17)) * scale).astype(np.float32)
    keys = [f"entity_{i}" for i in range(300)]
    assert format_rows(keys, values) == python_text(keys, values)


def test_random_bit_patterns_match_python() -> None:
    """Every exponent and mantissa (within the fast path's range, plus NaN/inf/huge fallbacks)."""
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2**32, size=(400, 25), dtype=np.uint64).astype(np.uint32)
    # Biased exponents 0..159 (subnormals up to just below 2**33) except in every 100th row,
    # which keeps fully random patterns (NaN, inf, huge: the fallback path).
    exponents = rng.integers(0, 160, size=bits.shape, dtype=np.uint32)
    limited = (bits & np.uint32(0x807FFFFF)) | (exponents << np.uint32(23))
    bits = np.where((np.arange(400) % 100 == 0)[:, None], bits, limited)
    values = bits.view(np.float32)
    keys = [f"k{i}" for i in range(400)]
    with np.errstate(invalid="ignore"):
        fast_rows = np.all(np.abs(values) < 2.0**33, axis=1)
    assert fast_rows.sum() == 396 and np.isnan(values).any()  # both paths are exercised
    blocks = [format_rows(keys[i : i + 20], values[i : i + 20]) for i in range(0, 400, 20)]
    assert b"".join(blocks) == python_text(keys, values)


def test_fallbacks_give_the_same_text() -> None:
    values = np.array([[np.nan, np.inf], [-np.inf, 1e20]], dtype=np.float32)
    assert format_rows(["x", "y"], values) == b"x\tnan\tinf\ny\t-inf\t100000002004087734272.000000000\n"
    # float64 input is formatted as itself, not through float32.
    assert format_rows(["z"], np.array([[0.1]])) == b"z\t0.100000000\n"


def test_names_utf8_nul_long_and_multi_field() -> None:
    values = np.array([[1.5], [-2.0], [0.25], [3.0]], dtype=np.float32)
    keys = ["caf\u00e9", "\u6771\u4eac", "rel\trhs\ttranslation\tw\t1", "x" * 2000]
    assert format_rows(keys, values) == python_text(keys, values)
    with_nul = ["a\0b", "c"]
    assert format_rows(with_nul, values[:2]) == b"a\x00b\t1.500000000\nc\t-2.000000000\n"


def test_values_round_trip_to_the_same_float32() -> None:
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((200, 8)) * 0.5).astype(np.float32)
    lines = format_rows([str(i) for i in range(200)], values).decode().splitlines()
    parsed = np.array([[float(v) for v in line.split("\t")[1:]] for line in lines], dtype=np.float32)
    reference = np.array(
        [[float("%.9f" % float(v)) for v in row] for row in values], dtype=np.float32
    )  # what PBG's file parses back to
    np.testing.assert_array_equal(parsed, reference)
    # 9 decimals keep every float32 of magnitude >= 0.5 exactly (its ulp is >= 6e-8).
    big = np.abs(values) >= 0.5
    np.testing.assert_array_equal(parsed[big], values[big])


def test_empty_and_mismatched() -> None:
    assert format_rows([], np.zeros((0, 3), dtype=np.float32)) == b""
    with pytest.raises(ValueError, match=r"2 keys for values of shape \(3, 1\)"):
        format_rows(["a", "b"], np.zeros((3, 1), dtype=np.float32))


def test_write_blocks_keeps_order_across_threaded_blocks() -> None:
    rng = np.random.default_rng(5)
    values = rng.standard_normal((1000, 3)).astype(np.float32)
    keys = [f"n{i}" for i in range(1000)]
    out = io.BytesIO()
    assert write_blocks(out, keys, values, block=64) == 1000
    assert out.getvalue() == format_rows_slow(keys, values)
