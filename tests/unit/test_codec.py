"""The codec (SPEC §4.20): the text it writes decodes to the value a workflow sees, exactly;
what JSON cannot hold is refused, naming the place; equal inputs have one canonical form."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from durably import InvalidInput, PayloadTooLarge
from durably.core.codec import canonical, decode, encode, parse

EXACT: list[Any] = [
    1e23, 5e-324, 1.7976931348623157e308, -0.0, 0.1, 2**64 + 1, -(2**100), "\U0001f600é",
    {"zz": 1, "a": {"bbb": 2, "c": 3}}, [None, True, False, ""], "NaN", "Infinity",
    "a\\u0000b",  # a backslash and "u0000": text, not a NUL
]  # fmt: skip


@pytest.mark.parametrize("value", EXACT, ids=repr)
def test_the_decoded_text_is_the_value_with_its_order(value: Any) -> None:
    got = decode(encode(value, "v"))
    assert json.dumps(got) == json.dumps(value)


_TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-(10**4300) + 1, 10**4300 - 1) | _TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=10,
))  # fmt: skip
def test_any_json_value_comes_back_as_it_went_in(value: Any) -> None:
    assert json.dumps(decode(encode(value, "v"))) == json.dumps(value)


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Reading(BaseModel):
    value: float
    tags: dict[str, Any] = {}


@pytest.mark.parametrize(
    "value, why",
    [
        (math.nan, "NaN has no JSON form"),
        (math.inf, "Infinity has no JSON form"),
        ({"a": [1, -math.inf]}, "-Infinity has no JSON form"),
        (Point(1.0, math.nan), "NaN has no JSON form"),
        ("a\x00b", "holds a NUL character"),
        ({"k\x00": 1}, "holds a NUL character"),
        ([["deep", {"x": "\x00"}]], "holds a NUL character"),
        (object(), "is not JSON-serializable"),
        pytest.param([1, {"n": 10**4300}], "holds an integer of 4301 digits", id="huge-int"),
        pytest.param(-(10**5000), "holds an integer of 5001 digits", id="-huge-int"),
    ],
)
def test_what_json_cannot_hold_is_refused_naming_the_place(value: Any, why: str) -> None:
    with pytest.raises(InvalidInput, match=f"^the result of step 'x' .*{why}"):
        encode(value, "the result of step 'x'")


def test_a_model_s_own_nan_is_pydantic_s_null() -> None:
    # pydantic writes a model's float field NaN as null (its ser_json_inf_nan default):
    # that is the value, live and replayed alike.
    assert decode(encode(Reading(value=math.nan), "v")) == {"value": None, "tags": {}}


def test_the_size_limit_names_the_place() -> None:
    with pytest.raises(PayloadTooLarge, match=r"^the input .* over the limit of 10"):
        encode("x" * 20, "the input", limit=10)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}'])
def test_typed_json_refuses_what_python_s_reader_takes(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"^--input is not valid JSON: .*has no JSON form"):
        parse(text, "--input")


def test_typed_json_refuses_a_nul_and_bad_json() -> None:
    with pytest.raises(InvalidInput, match=r"^--data holds a NUL character"):
        parse('"a\\u0000b"', "--data")
    with pytest.raises(InvalidInput, match=r"^--data is not valid JSON: Expecting .* column 2$"):
        parse("{oops", "--data")
    assert json.dumps(parse('{"b": 1e23, "a": -0.0}', "--data")) == '{"b": 1e+23, "a": -0.0}'
    with pytest.raises(InvalidInput, match=r"^--data is not valid JSON: .*integer of 5000 digits"):
        parse(f'{{"n": {"9" * 5000}}}', "--data")


def test_typed_json_nested_beyond_the_reader_is_invalid_input() -> None:
    # An HTTP body or CLI argument: a 400 / exit 2, not an internal error.
    with pytest.raises(InvalidInput, match="--data is nested too deeply"):
        parse("[" * 100_000 + "]" * 100_000, "--data")


def test_an_int_of_4300_digits_is_exact_and_a_long_digit_string_is_text() -> None:
    # The limit is Python's reader's (sys.get_int_max_str_digits' default), whatever this
    # process set: a worker elsewhere reads the row. Digits in a string are only text.
    for value in (10**4299, -(10**4299), {"s": "1" * 10_000, "f": 1.5}):
        assert decode(encode(value, "v")) == value


def test_equal_inputs_have_one_canonical_form() -> None:
    assert canonical({"a": 1e23, "bb": [1]}) == canonical({"bb": [1], "a": 1e23})
    assert canonical({"a": True}) != canonical({"a": 1})
    assert canonical(1) != canonical(1.0)
    assert canonical("é") == '"é"'
