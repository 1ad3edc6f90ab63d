"""Payloads sealed at rest (`core.sealing`, `core.fernet`): the stored form is a JSON
string, opened wherever it sits in a JSON text (an aggregate's whitespace included) and
nowhere else; a codec of bytes or of text fits; a value no key opens reads
"<encrypted>"; a plain value that would read as sealed is refused."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durably import Codec, ConfigurationError, FernetCodec, InvalidInput, PayloadTooLarge
from durably.core.codec import decode, encode
from durably.core.sealing import ENCRYPTED, Stored, open_text, seal


class Reversing:
    """A codec of bytes (as a KMS' would be): stored base64-encoded."""

    def encode(self, data: bytes) -> bytes:
        return data[::-1]

    def decode(self, data: bytes) -> bytes:
        return data[::-1]


def test_a_fernet_token_is_a_json_string_opened_inside_any_json_text() -> None:
    codec = FernetCodec([FernetCodec.generate_key()])
    assert isinstance(codec, Codec)
    stored = encode({"b": 1e23, "a": [1, "x"]}, "the value", codec=codec)
    assert isinstance(stored, Stored) and json.loads(stored).startswith("durably:enc:t:gAAAA")
    assert decode(stored) == {"b": 1e23, "a": [1, "x"]}  # its plain text, not opened again
    aggregate = f'[{{"output" : {stored}, "error": null}},\n {stored}]'  # PostgreSQL's spacing
    opened, ok = open_text(aggregate, codec)
    assert ok and json.loads(opened) == [{"output": {"b": 1e23, "a": [1, "x"]}, "error": None},
                                         {"b": 1e23, "a": [1, "x"]}]  # fmt: skip
    assert list(json.loads(opened)[1]) == ["b", "a"]


def test_a_codec_of_bytes_is_stored_as_base64() -> None:
    stored = seal('{"k": "v"}', Reversing())
    assert json.loads(stored) == "durably:enc:b:" + base64.urlsafe_b64encode(b'}"v" :"k"{').decode()
    assert open_text(stored, Reversing()) == ('{"k": "v"}', True)


def test_a_codec_returning_anything_else_is_a_configuration_error() -> None:
    class Bad:
        def encode(self, data: bytes) -> str:
            return 'has spaces and "quotes"'

        def decode(self, data: bytes) -> bytes:
            return data

    with pytest.raises(ConfigurationError, match="URL-safe base64"):
        encode("x", "the value", codec=Bad())


def test_without_the_key_a_value_reads_encrypted_and_says_so() -> None:
    stored = encode("secret", "the value", codec=FernetCodec([FernetCodec.generate_key()]))
    other = FernetCodec([FernetCodec.generate_key()])
    for codec in (None, other):
        assert open_text(f"[{stored}]", codec) == (f'["{ENCRYPTED}"]', False)


def test_rotation_the_first_key_encrypts_any_key_decrypts() -> None:
    old, new = FernetCodec.generate_key(), FernetCodec.generate_key()
    by_old = encode("v", "the value", codec=FernetCodec([old]))
    by_new = encode("v", "the value", codec=FernetCodec(f"{new}, {old}"))
    assert open_text(by_old, FernetCodec([new, old])) == ('"v"', True)
    assert open_text(by_new, FernetCodec([new])) == ('"v"', True)
    assert open_text(by_new, FernetCodec([old]))[1] is False


def test_plain_text_that_only_looks_alike_is_left_alone_and_a_look_alike_value_refused() -> None:
    inside = json.dumps(['a "durably:enc:t:abc" b', 'x\\"durably:enc:t:abc'])
    assert open_text(inside, None) == (inside, True)  # inside strings: escaped quotes
    with pytest.raises(InvalidInput, match="keeps for encrypted values"):
        encode({"k": "durably:enc:t:abc"}, "the value")
    assert encode('a "durably:enc:t:abc"', "the value")  # inside a string: fine


def test_bad_keys_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="generate_key"):
        FernetCodec(["not a key"])
    with pytest.raises(ConfigurationError, match="at least one"):
        FernetCodec("")


def test_the_limit_applies_to_the_sealed_text() -> None:
    codec = FernetCodec([FernetCodec.generate_key()])
    with pytest.raises(PayloadTooLarge, match="as stored, encrypted"):
        encode("x" * 700, "the value", 1000, codec)
    assert len(encode("x" * 500, "the value", 1000, codec)) <= 1000


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
))  # fmt: skip
def test_any_value_opens_to_its_exact_text(value: object) -> None:
    codec = FernetCodec([FernetCodec.generate_key()])
    try:
        plain = encode(value, "the value")
    except InvalidInput:
        return  # a look-alike string, drawn by chance
    opened, ok = open_text(encode(value, "the value", codec=codec), codec)
    assert ok and opened == plain
