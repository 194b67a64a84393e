"""chordrt.moe_decode_path (chord_moe_decode_path): host only, no GPU needed."""

import pytest


def test_paths_follow_what_each_serves(chord):
    # MXFP8 has no indexed path; past 128 tokens there is no warp decode.
    assert chord.moe_decode_path(chord.WeightFormat.MXFP8, 7168, 256, 384, 8, 64) == chord.MoeDecodePath.WARP
    assert chord.moe_decode_path(chord.WeightFormat.INT4_GROUP32, 7168, 2048, 48, 8, 1000,
                                 num_global_experts=384) == chord.MoeDecodePath.INDEXED
    # One token of Kimi K2 TP8: warp decode.
    assert chord.moe_decode_path("INT4_GROUP32", 7168, 256, 384, 8, 1) == chord.MoeDecodePath.WARP


def test_errors_name_the_problem(chord):
    with pytest.raises(chord.ChordError) as e:
        chord.moe_decode_path(chord.WeightFormat.MXFP8, 7168, 256, 384, 8, 129)
    assert e.value.status == chord.Status.UNSUPPORTED
    assert "neither decode path" in e.value.message
    with pytest.raises(chord.ChordError) as e:
        chord.moe_decode_path(chord.WeightFormat.INT4_GROUP32, 7168, 256, 384, 8, 0)
    assert e.value.status == chord.Status.INVALID_ARGUMENT
    assert "num_tokens" in e.value.message
