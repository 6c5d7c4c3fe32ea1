"""Training data: scikit-learn's bundled digits, or a user's .npz, with a held-out test split.

Images are real values in [0, 1) with shape (N, C, H, W); labels are class numbers.
A .npz holds ``x`` ((N, C, H, W) or (N, H, W) for one channel) and ``y`` (N,), and
optionally its own test split ``x_test`` and ``y_test``; without one, a seeded
``test_fraction`` is held out, stratified by class where every class has two samples.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from .errors import SpecError

DIGITS = "digits"
SOURCE_HELP = f"'{DIGITS}' (scikit-learn's 8x8 digits) or an .npz with arrays x, y [, x_test, y_test]"


@dataclass(frozen=True)
class Dataset:
    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def _digits():
    digits = load_digits()
    # 4-bit pixels 0..16, scaled into [0, 1]
    return digits.images[:, None, :, :] / 16.0, digits.target.astype(np.int64)


def _npz(path):
    try:
        data = np.load(path)
    except (OSError, ValueError) as error:
        raise SpecError(f"data file {path}: {error}") from None
    missing = [key for key in ("x", "y") if key not in data]
    if missing:
        raise SpecError(f"data file {path}: no array {' or '.join(missing)} (it has {', '.join(data.files)})")
    arrays = {key: np.asarray(data[key]) for key in data.files}
    for key in ("x", "x_test"):
        if key in arrays and arrays[key].ndim == 3:
            arrays[key] = arrays[key][:, None]
    return arrays


def _checked(name, x, y, input_shape, classes, what):
    if x.ndim != 4 or x.shape[1:] != tuple(input_shape):
        raise SpecError(f"{name}: {what} images have shape {x.shape[1:]}, the network takes {tuple(input_shape)}")
    if y.shape != (len(x),) or y.dtype.kind not in "iu" or (y.size and (y.min() < 0 or y.max() >= classes)):
        raise SpecError(f"{name}: {what} labels must be {len(x)} integers in 0..{classes - 1}")
    return x.astype(np.float64), y.astype(np.int64)


def load(source, input_shape, classes, *, test_fraction=0.2, seed=0, limit=None):
    """``source``: "digits" or the path of a .npz. Checked against the network's input shape
    and number of classes. ``limit``: use only the first that many samples (before the split)."""
    if source == DIGITS:
        x, y = _digits()
        arrays = {"x": x, "y": y}
    elif Path(source).suffix == ".npz":
        arrays = _npz(source)
    else:
        raise SpecError(f"data '{source}': give '{DIGITS}' or a .npz file")
    x, y = _checked(source, arrays["x"][:limit], arrays["y"][:limit], input_shape, classes, "training")
    if "x_test" in arrays and "y_test" in arrays:
        test_x, test_y = _checked(source, arrays["x_test"], arrays["y_test"], input_shape, classes, "test")
        return Dataset(str(source), x, y, test_x, test_y)
    held = int(np.ceil(len(x) * test_fraction))
    if held < 1 or held >= len(x):
        raise SpecError(f"{source}: {len(x)} samples cannot be split into training and a {test_fraction:.0%} test set")
    # Stratifying puts every class in both splits: it needs two samples of each, and room for
    # every class in each split.
    counts = np.unique(y, return_counts=True)[1]
    stratify = y if counts.min() >= 2 and min(held, len(x) - held) >= len(counts) else None
    train_x, test_x, train_y, test_y = train_test_split(x, y, test_size=held, stratify=stratify, random_state=seed)
    return Dataset(str(source), train_x, train_y, test_x, test_y)
