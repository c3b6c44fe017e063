"""Tests of the codec factory (jax_lossy_comm/codec_factory.py): every accepted name, any
case, gives the CommCodec it names (TorchRec's precision names included), the exact names
give None, an unknown name is a ValueError listing the valid ones.
"""

from __future__ import annotations

import pytest

import jax_lossy_comm as jlc
from jax_lossy_comm import codec_factory as cf
from jax_lossy_comm import frame

EXPECTED = {
    "int8-rowwise": jlc.Int8Rowwise(),
    "INT8": jlc.Int8Rowwise(),
    "bf16": jlc.BF16(),
    "BF16": jlc.BF16(),
    "fp16": jlc.FP16(),
    "Fp16": jlc.FP16(),
    "fp8-rowwise": jlc.FP8Rowwise(),
    "FP8": jlc.FP8Rowwise(),
    "FP8_ROWWISE": jlc.FP8Rowwise(),
    "mx4": jlc.MX4(),
    "MX4": jlc.MX4(),
    "auto": jlc.FrameCodec(),
    "FIXED": jlc.FrameCodec(codec="fixed"),
    "raw": jlc.FrameCodec(codec="raw"),
    "dedup": jlc.FrameCodec(codec="dedup"),
    "Entropy": jlc.FrameCodec(codec="entropy"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_gives_the_codec_it_names(name):
    got = jlc.get_comm_codec(name)
    assert got == EXPECTED[name] and type(got) is type(EXPECTED[name])
    assert isinstance(got, jlc.CommCodec)


@pytest.mark.parametrize("name", ["FP32", "fp32", "exact", "EXACT"])
def test_the_exact_names_give_no_codec(name):
    assert jlc.get_comm_codec(name) is None


def test_every_listed_name_is_accepted_and_the_frame_forms_are_the_formats():
    assert cf.FRAME_CODECS == tuple(frame.CODECS)
    for name in cf.NAMES:
        assert cf.canonical_name(name.upper()) == cf.canonical_name(name)
        codec = jlc.get_comm_codec(name)
        assert codec is None or isinstance(codec, jlc.CommCodec)
    assert set(cf.TORCHREC_NAMES.values()) == set(cf.BASELINES)


def test_frame_codec_fields_pass_through_and_the_baselines_ignore_them():
    assert jlc.get_comm_codec("fixed", mode="abs", min_error_bound=0.02) == jlc.FrameCodec(
        mode="abs", codec="fixed", min_error_bound=0.02
    )
    assert jlc.get_comm_codec("int8", mode="abs", min_error_bound=0.02) == jlc.Int8Rowwise()
    with pytest.raises(ValueError, match="min_error_bound"):
        jlc.get_comm_codec("auto", min_error_bound=0.0)
    with pytest.raises(ValueError, match="FrameCodec.mode"):
        jlc.get_comm_codec("auto", mode="relative")


@pytest.mark.parametrize("bad", ["int4", "", "fp64", "int8 rowwise", "zstd"])
def test_an_unknown_name_is_a_value_error_listing_the_valid_names(bad):
    with pytest.raises(ValueError, match=f"unknown codec {bad!r}") as e:
        jlc.get_comm_codec(bad)
    for name in cf.NAMES:
        assert name in str(e.value)


def test_a_name_that_is_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="a codec name is a str"):
        jlc.get_comm_codec(jlc.Int8Rowwise)
