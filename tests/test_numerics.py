"""The fixed-point definition in mapping/numerics.py: hash, rounding, formats, constants.

The known-answer vectors are the hardware's specification of the rounding noise:
if one of them changes, every bit-exact comparison with the hardware changes too.
"""

import re

import numpy as np
import pytest

from mapping import numerics
from mapping.numerics import Formats, requantize

SEED = Formats().seed


@pytest.mark.parametrize("tensor, sample", [(numerics.tensor_id(9, numerics.WEIGHT_UPDATE), 3), (25, 70000)])
def test_noise_of_different_elements_is_uncorrelated(tensor, sample):
    """Elements i and i + lag of one tensor, lags 1..64, for the noise window of every
    rounding shift the default formats use and that window's top byte (which decides most
    round-ups): the correlation stays within 5.5 standard errors of 0 (the three-round hash
    reached 0.27 at lag 2 in bits 16..23)."""
    f, n, lags = Formats(), 1 << 16, 64
    words = numerics.noise(SEED, tensor, sample, np.arange(n + lags))
    limit = 5.5 / np.sqrt(n)
    for shift in {f.fp_shift, f.eb_shift, f.weight_update_shift, f.bias_update_shift}:
        for low in {0, max(0, shift - 8)}:
            v = ((words & np.uint64((1 << shift) - 1)) >> np.uint64(low)).astype(np.float64)
            v = (v - v.mean()) / v.std()
            worst = max(abs(float(np.mean(v[:n] * v[lag:lag + n]))) for lag in range(1, lags + 1))
            assert worst < limit, f"shift {shift}, bits {low}..{shift - 1}: correlation {worst:.3f}"

@pytest.mark.parametrize("start", [0, 0x7FF80000, 0xFFF00000])
def test_mix32_has_no_collisions_on_2_20_consecutive_inputs(start):
    x = (np.arange(1 << 20, dtype=np.uint64) + np.uint64(start)) & np.uint64(0xFFFFFFFF)
    out = numerics.mix32(x)
    assert out.max() <= 0xFFFFFFFF
    assert np.unique(out).size == 1 << 20


def test_mix32_known_answers():
    assert [int(v) for v in numerics.mix32([0, 1, 2, 0xFFFFFFFF, 0x12345678])] == [
        0, 591172105, 1182344211, 2151355619, 656146658]
    # Inputs are taken modulo 2**32, as the 32-bit hardware unit sees them.
    assert int(numerics.mix32(1 << 32 | 0x12345678)) == 656146658


def test_noise_known_answers():
    index = [0, 1, 2, 3, 1000, 65535]
    assert int(numerics.stream_key(SEED, 0, 0)) == 1031991521
    assert [int(v) for v in numerics.noise(SEED, 0, 0, index)] == [
        324749338, 1606414345, 3081561925, 2399074253, 2914832381, 3612819100]
    assert numerics.tensor_id(3, numerics.EB_OUT) == 25
    assert [int(v) for v in numerics.noise(SEED, 25, 7, index)] == [
        3465425876, 350351029, 168969743, 1652716036, 1351549264, 4253627657]
    assert numerics.tensor_id(9, numerics.WEIGHT_UPDATE) == 74
    assert [int(v) for v in numerics.noise(1, 74, 123456, index)] == [
        2060875788, 1060483873, 2058222550, 1348889272, 3572767762, 2730698259]


def test_tensor_ids_are_distinct_per_layer_and_kind():
    kinds = (numerics.FP_OUT, numerics.EB_OUT, numerics.WEIGHT_UPDATE, numerics.BIAS_UPDATE,
             numerics.LOSS_ERROR)
    ids = [numerics.tensor_id(p, k) for p in range(64) for k in kinds]
    assert len(set(ids)) == len(ids)


def test_requantize_shift_zero_passes_through_and_saturates():
    acc = [5, -7, 0, 32767, -32768, 40000, -40000]
    assert requantize(acc, 0, SEED, 1, 0).tolist() == [5, -7, 0, 32767, -32768, 32767, -32768]


def test_requantize_negative_shift_is_an_exact_left_shift():
    acc = [3, -3, 0, 2047, -2048, 2048, -2049, 1 << 60]
    assert requantize(acc, -4, SEED, 1, 0).tolist() == [48, -48, 0, 32752, -32768, 32767, -32768, 32767]


@pytest.mark.parametrize("shift", [1, 12, 24, 32])
def test_requantize_saturates_at_both_ends(shift):
    acc = np.array([40000 << shift, -(40000 << shift), (32767 << shift) + (1 << shift) - 1,
                    -(32768 << shift), -(32768 << shift) - 1], dtype=np.int64)
    out = requantize(np.repeat(acc, 256), shift, SEED, 2, 5).reshape(5, 256)
    assert (out[0] == 32767).all() and (out[2] == 32767).all()
    assert (out[1] == -32768).all() and (out[3] == -32768).all() and (out[4] == -32768).all()


@pytest.mark.parametrize("shift", [1, 4, 12, 24, 32])
def test_requantize_keeps_representable_values(shift):
    words = np.random.default_rng(shift).integers(-32768, 32768, 4096)
    for sample in range(3):
        assert (requantize(words << shift, shift, SEED, 3, sample) == words).all()


@pytest.mark.parametrize("shift, fraction", [(1, 1), (4, 3), (12, 1), (12, 2867), (24, 5 << 20)])
def test_requantize_rounds_up_with_probability_equal_to_the_fraction(shift, fraction):
    n = 1 << 16
    word = -1234
    acc = np.full(n, (word << shift) + fraction, dtype=np.int64)
    out = requantize(acc, shift, SEED, 4, 0)
    assert set(np.unique(out).tolist()) <= {word, word + 1}
    p = fraction / (1 << shift)
    assert abs((out == word + 1).mean() - p) < 4 * np.sqrt(p * (1 - p) / n) + 1 / n


@pytest.mark.parametrize("shift", [4, 12, 24])
def test_stochastic_rounding_is_unbiased_over_sample_numbers(shift):
    rng = np.random.default_rng(shift)
    acc = rng.integers(-(1 << (shift + 10)), 1 << (shift + 10), 8)
    samples = 20000
    out = np.stack([requantize(acc, shift, SEED, 5, s) for s in range(samples)])
    exact = acc / (1 << shift)
    frac = exact - np.floor(exact)
    stderr = np.sqrt(frac * (1 - frac) / samples)
    assert (np.abs(out.mean(axis=0) - exact) <= 4 * stderr + 1e-12).all()


def test_requantize_in_any_element_order_gives_identical_bits():
    rng = np.random.default_rng(7)
    acc = rng.integers(-(1 << 30), 1 << 30, (5, 6, 7))
    whole = requantize(acc, 12, SEED, 9, 42)
    assert (requantize(acc, 12, SEED, 9, 42, index=np.arange(acc.size).reshape(acc.shape)) == whole).all()
    flat = acc.ravel()
    for i in rng.permutation(acc.size):
        one = requantize(flat[i:i + 1], 12, SEED, 9, 42, index=np.array([i]))
        assert one[0] == whole.flat[i]


def test_requantize_depends_on_seed_tensor_and_sample():
    acc = np.random.default_rng(8).integers(-(1 << 24), 1 << 24, 1000)
    base = requantize(acc, 12, SEED, 1, 0)
    for other in (requantize(acc, 12, SEED + 1, 1, 0), requantize(acc, 12, SEED, 2, 0),
                  requantize(acc, 12, SEED, 1, 1)):
        assert (other != base).sum() > 100


def test_requantize_refuses_shifts_beyond_the_noise_word():
    with pytest.raises(ValueError, match=re.escape("requantize: shift 33 exceeds the 32-bit noise word")):
        requantize([1], 33, SEED, 0, 0)


def test_quantize_rounds_to_nearest_and_saturates():
    assert numerics.quantize([0.5, -0.5, 1 / 512, 3 / 512, 127.999, 200.0, -200.0], 8).tolist() == [
        128, -128, 0, 2, 32767, 32767, -32768]
    words = np.arange(-32768, 32768)
    assert (numerics.quantize(numerics.dequantize(words, 12), 12) == words).all()


def test_lr_constant():
    f = Formats()
    assert numerics.lr_constant(0.05, 8, f) == 410  # round(0.00625 * 65536) = round(409.6)
    assert numerics.lr_constant(1 / 4, 1, f) == 16384
    assert numerics.lr_constant(0.5, 1, Formats(lr_frac=8)) == 128
    with pytest.raises(ValueError) as info:
        numerics.lr_constant(1e-7, 1, f)
    assert str(info.value) == ("learning rate 1e-07 / batch 1 = 1e-07 is not representable as an "
                               "unsigned 16-bit constant with 16 fractional bits")
    with pytest.raises(ValueError) as info:
        numerics.lr_constant(2, 2, f)
    assert str(info.value) == ("learning rate 2 / batch 2 = 1 is not representable as an "
                               "unsigned 16-bit constant with 16 fractional bits")


def test_format_shifts():
    f = Formats()
    assert (f.fp_shift, f.eb_shift, f.weight_update_shift, f.bias_update_shift, f.loss_shift) == (
        12, 12, 24, 16, -4)
    g = Formats(act_frac=6, weight_frac=10, bias_frac=9, error_frac=14, lr_frac=12)
    assert (g.fp_shift, g.eb_shift, g.weight_update_shift, g.bias_update_shift, g.loss_shift) == (
        10, 10, 22, 17, -8)


@pytest.mark.parametrize("kwargs, message", [
    ({"act_frac": 32}, "formats: act_frac = 32 is outside 0..31"),
    ({"weight_frac": -1}, "formats: weight_frac = -1 is outside 0..31"),
    ({"lr_frac": 40}, "formats: lr_frac = 40 is outside 0..31"),
    ({"bias_frac": 21}, "formats: bias_frac = 21 exceeds act_frac + weight_frac = 20; "
                        "the bias could not be aligned exactly"),
    ({"seed": 1 << 32}, "formats: seed = 4294967296 is not a 32-bit unsigned value"),
    ({"seed": -1}, "formats: seed = -1 is not a 32-bit unsigned value"),
    ({"grad_bits": 20}, "formats: grad_bits = 20 is not one of 16, 24, 32, 48"),
    ({"act_frac": 0, "error_frac": 17, "weight_frac": 0, "bias_frac": 0},
     "formats: loss_shift = -17 shifts left by more than 15 bits, beyond a 48-bit value's room in 64"),
    ({"grad_frac": 16}, "formats: grad_frac = 16 with grad_bits = 48: the exact sums have the terms' 20 "
                        "fractional bits"),
    ({"grad_bits": 16, "grad_frac": 21}, "formats: grad_frac = 21 is outside 0..20 (the terms' fractional bits)"),
    ({"grad_bits": 16, "bias_grad_frac": -1}, "formats: bias_grad_frac = -1 is outside 0..12 (the terms' "
                                              "fractional bits)"),
])
def test_formats_errors(kwargs, message):
    with pytest.raises(ValueError) as info:
        Formats(**kwargs)
    assert str(info.value) == message


def test_acc_bits_needed():
    # One product of two words reaches 2**30 (-32768 * -32768): 31 magnitude bits + sign.
    assert numerics.acc_bits_needed(1) == 32
    assert numerics.acc_bits_needed(1 << 16) == 48
    assert numerics.acc_bits_needed(1 << 17) == 49


def test_fixed_softmax_is_within_0_0025_of_float_softmax():
    """docs/numerics.md: the largest |p - softmax| over random score vectors of 10 classes,
    normal with standard deviations from 1/4 to 128 (past the table's reach) in Q7.8."""
    f, rng, worst = Formats(loss="ce"), np.random.default_rng(0), 0.0
    for scale in (0.25, 1, 4, 16, 128):
        for _ in range(4000):
            y = numerics.saturate(np.round(rng.normal(0, scale, 10) * (1 << f.act_frac))).astype(np.int64)
            p = numerics.softmax(y, f.act_frac)
            # Each p_c is floored once (and recip once): the sum is 1 to within 11 LSBs.
            assert 0 <= p.min() and (1 << numerics.SOFTMAX_FRAC) - 11 <= p.sum() <= 1 << numerics.SOFTMAX_FRAC
            real = numerics.dequantize(y, f.act_frac)
            exact = np.exp(real - real.max()) / np.exp(real - real.max()).sum()
            worst = max(worst, np.abs(p / (1 << numerics.SOFTMAX_FRAC) - exact).max())
    print(f"max |p - softmax| = {worst:.5f}")
    assert 0.0015 < worst < 0.0025


def test_softmax_of_equal_scores_and_of_one_far_ahead():
    assert list(numerics.softmax([7, 7, 7, 7], 8)) == [1 << 14] * 4
    # 2**32 // 2**15 = 2**17 exactly: the winner's p is 1.0, the others' exponents read 0.
    assert list(numerics.softmax([0, 3000, -5, numerics.WORD_MIN], 8)) == [0, 1 << 16, 0, 0]
    assert len(numerics.EXP_TABLE) == 710 and numerics.EXP_TABLE[0] == 1 << 15


def test_gradient_sum_formats():
    exact, narrow = Formats(), Formats(grad_bits=16)
    assert (exact.grad_frac, exact.bias_grad_frac, exact.grad_shift, exact.bias_grad_shift) == (20, 12, 0, 0)
    # Narrow sums keep GRAD_INT_BITS integer bits; the update's shift counts from their fraction.
    assert (narrow.grad_frac, narrow.bias_grad_frac, narrow.grad_shift, narrow.bias_grad_shift) == (8, 8, 12, 4)
    assert (narrow.weight_update_shift, narrow.bias_update_shift) == (8 + 16 - 12, 8 + 16 - 12)
    assert (Formats(grad_bits=32).grad_frac, Formats(grad_bits=32).grad_shift) == (20, 0)
    assert Formats(grad_bits=24, grad_frac=14).grad_shift == 6
    assert Formats(**Formats(grad_bits=24).to_dict()) == Formats(grad_bits=24)


def test_grad_noise_is_the_pixel_hash_xor_the_scrambled_index():
    tensor = numerics.tensor_id(3, numerics.GRAD_SUM)
    words = numerics.grad_noise(SEED, tensor, 7, [0, 5], np.array([[0, 1], [2, 1000]]))
    for row, pixel in enumerate([0, 5]):
        for (a, b), index in np.ndenumerate(np.array([[0, 1], [2, 1000]])):
            expected = int(numerics.noise(SEED, tensor, 7, pixel)) ^ (index * 0x9E3779B1 % (1 << 32))
            assert int(words[row, a, b]) == expected


def test_accumulate_rounds_each_term_and_saturates_each_add_in_order():
    tensor, sample, index = numerics.tensor_id(1, numerics.GRAD_SUM), 4, np.arange(3)
    terms = np.array([[1000, -1000, 77], [1000, -1000, 5], [-1000, 1000, -300]])
    r = numerics.grad_noise(SEED, tensor, sample, np.arange(3), index) & np.uint64(15)
    rounded = (terms + r.astype(np.int64)) >> 4
    got = numerics.accumulate(np.zeros(3, dtype=np.int64), terms, 4, 16, SEED, tensor, sample, index)
    assert np.array_equal(got, rounded.sum(axis=0))
    # Saturation at 16 bits, in order: +30000 +30000 -30000 ends at 32767 - 30000, not 30000.
    big = np.array([[30000 << 4], [30000 << 4], [-30000 << 4]])
    assert numerics.accumulate(np.zeros(1, dtype=np.int64), big, 4, 16, SEED, tensor, sample, [0])[0] == 2767
    assert numerics.accumulate(np.zeros(1, dtype=np.int64), big, 0, numerics.ACC_BITS, SEED, tensor,
                               sample, [0])[0] == 30000 << 4
    with pytest.raises(ValueError, match=r"^accumulate: 48-bit sums are exact, not rounded by 4 bits$"):
        numerics.accumulate(np.zeros(1, dtype=np.int64), big, 4, numerics.ACC_BITS, SEED, tensor, sample, [0])


def test_accumulated_rounding_is_unbiased():
    """Each term of a fraction 0.3 LSB rounds up 30% of the time, whatever the weight: over
    4096 pixels every one of 64 weights sums to 0.3 * 4096 within 5 standard deviations."""
    tensor, pixels, weights, shift = numerics.tensor_id(2, numerics.GRAD_SUM), 4096, 64, 8
    terms = np.full((pixels, weights), int(0.3 * 256), dtype=np.int64)
    sums = numerics.accumulate(np.zeros(weights, dtype=np.int64), terms, shift, 24, SEED, tensor, 0,
                               np.arange(weights) * 9)
    p = int(0.3 * 256) / 256
    assert np.all(np.abs(sums - p * pixels) < 5 * np.sqrt(pixels * p * (1 - p)))
