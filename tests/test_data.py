"""Training data (mapping/data.py) and python -m sim.train's refusals."""

import numpy as np
import pytest

from mapping import data
from mapping.errors import SpecError
from sim.train import main

from .cli_refusal import refusal


def test_digits_are_split_into_a_seeded_held_out_set():
    dataset = data.load(data.DIGITS, (1, 8, 8), 10, seed=0)
    # scikit-learn's 1797 digits, 20% (rounded up) held out, stratified by class
    assert (len(dataset.train_x), len(dataset.test_x)) == (1437, 360)
    assert dataset.train_x.shape[1:] == (1, 8, 8) and dataset.train_x.max() == 1.0 and dataset.train_x.min() == 0
    again = data.load(data.DIGITS, (1, 8, 8), 10, seed=0)
    np.testing.assert_array_equal(again.test_y, dataset.test_y)


def test_npz_with_its_own_test_split(tmp_path):
    path = tmp_path / "d.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.random((6, 4, 4)), y=np.arange(6) % 3, x_test=rng.random((2, 4, 4)), y_test=[0, 2])
    dataset = data.load(str(path), (1, 4, 4), 3)
    assert dataset.train_x.shape == (6, 1, 4, 4) and list(dataset.test_y) == [0, 2]


def test_npz_split_is_stratified_where_every_class_has_two_samples(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "d.npz"
    np.savez(path, x=rng.random((10, 4, 4)), y=[0] * 5 + [1] * 5)
    dataset = data.load(str(path), (1, 4, 4), 3)
    assert sorted(dataset.test_y) == [0, 1]  # 20% of 10, one of each class
    np.savez(path, x=rng.random((10, 4, 4)), y=[0] * 9 + [2])  # class 2 once: split unstratified
    dataset = data.load(str(path), (1, 4, 4), 3)
    assert (len(dataset.train_y), len(dataset.test_y)) == (8, 2)
    assert sorted([*dataset.train_y, *dataset.test_y]) == [0] * 9 + [2]


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((4, 1, 5, 5)), "y": np.zeros(4, int)}, "training images have shape (1, 5, 5), the network "
                                                            "takes (1, 4, 4)"),
    ({"x": np.zeros((4, 4, 4)), "y": np.full(4, 3)}, "training labels must be 4 integers in 0..2"),
    ({"images": np.zeros((4, 4, 4))}, "no array x or y (it has images)"),
])
def test_bad_npz_files_are_refused_in_one_line(tmp_path, arrays, message):
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    with pytest.raises(SpecError) as error:
        data.load(str(path), (1, 4, 4), 3)
    assert str(error.value).endswith(message)


def test_sim_train_refuses_data_it_cannot_read(capsys):
    assert refusal(main, ["--data", "images.csv"], capsys) == "error: data 'images.csv': give 'digits' or a .npz file"
    assert refusal(main, ["--backend", "icarus"], capsys).startswith("error: argument --backend: invalid choice")
    assert refusal(main, ["--loss", "hinge"], capsys) == (
        "error: argument --loss: invalid choice: 'hinge' (choose from 'mse', 'ce') (see python -m sim.train --help)")


def test_sim_train_refuses_link_faults_it_cannot_simulate(capsys):
    assert refusal(main, ["--links", "--ber", "1.5"], capsys) == (
        "error: argument --ber: must be a number at least 0 and below 1, got '1.5' (see python -m sim.train --help)")
    assert refusal(main, ["--links", "--lock-loss", "0:100"], capsys) == (
        "error: argument --lock-loss: must be LINK:CYCLE:CYCLES with CYCLES at least 1, got '0:100' "
        "(see python -m sim.train --help)")
    assert refusal(main, ["--ber", "1e-4", "--samples", "8"], capsys) == "error: --ber and --lock-loss need --links"
    assert refusal(main, ["--links", "--lock-loss", "2:100:50", "--samples", "8"], capsys) == (
        "error: --lock-loss: link 2 is not a link of the chain (0..1)")
    assert refusal(main, ["--links", "--lane-width", "8", "--samples", "2", "--backend", "pysim"], capsys) == (
        "error: a link of 5 channels on a 8-bit lane: 5 channels leave -1 sequence bits in a 8-bit header with "
        "bursts of 16 words; use a wider lane or shorter bursts")
