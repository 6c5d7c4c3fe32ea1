"""Exact per-sample tensor operations of CNN training, for float64 or int64 arrays.

These are the primitives of the golden model. On int64 inputs every result is
exact (no rounding happens here; :mod:`mapping.numerics` rounds afterwards),
so the hardware blocks are compared against these functions directly.

Shapes: activations and errors are (C, H, W); conv weights are (OC, IC / G, K, K), with
``G`` the layer's groups (1 but for grouped convolution).

Definitions (those the fixed-point model relies on; sums are exact). With stride ``s`` and
padding ``p``, ``xp`` is ``x`` with ``p`` zero rows above and below and ``p`` zero columns
left and right (``xp[c, h + p, v + p] = x[c, h, v]``), and the output size is
``OH = (H + 2p - K) // s + 1``, ``OW = (W + 2p - K) // s + 1``: padded rows and columns past
the last window are never read.

- Groups: with ``G`` groups, ``IC`` input and ``OC`` output channels (G divides both),
  ``Cg = IC / G`` and ``Og = OC / G``; output channel ``o`` belongs to group ``g(o) = o // Og``
  and reads only the input channels of that group, ``g(o)*Cg + c`` for ``c`` in 0..Cg-1,
  with weight ``w[o, c, i, j]``. ``G = 1`` is the ordinary convolution (``Cg = IC``). A
  grouped convolution is exactly the G ordinary convolutions of input channels
  ``g*Cg .. (g+1)*Cg - 1`` with weights ``w[g*Og:(g+1)*Og]``, their outputs concatenated
  in group order; its errors the same with the G inputs' errors concatenated.
- conv_forward: cross-correlation (the kernel is not flipped),
  ``y[o, r, q] = sum over c < Cg, i, j of xp[g(o)*Cg + c, r*s + i, q*s + j] * w[o, c, i, j]``,
  plus ``bias[o] * 2**bias_shift`` when a bias is given.
- conv_backward: the transpose of conv_forward (without bias) onto the unpadded input,
  ``dx[g*Cg + c, h, v] = sum of err[o, r, q] * w[o, c, i, j] over the Og outputs o of group
  g and r, q, i, j with r*s + i - p = h and q*s + j - p = v``: taps that fall in the padding
  are dropped and an input position no window reads gets 0.
- conv_weight_grad: ``dw[o, c, i, j] = sum over r, q of err[o, r, q] * xp[g(o)*Cg + c, r*s + i, q*s + j]``.
- bias_grad: ``db[o] = sum over r, q of err[o, r, q]``.
- maxpool_forward / maxpool_backward: see their docstrings.
"""

import numpy as np


def pad(x, padding):
    if padding == 0:
        return x
    return np.pad(x, ((0, 0), (padding, padding), (padding, padding)))


def windows(x, kernel, stride=1, padding=0):
    """K x K windows of ``x`` as the line buffer emits them: (OH, OW, C, K, K), raster order."""
    xp = pad(x, padding)
    c, h, w = xp.shape
    oh, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    view = np.lib.stride_tricks.sliding_window_view(xp, (kernel, kernel), axis=(1, 2))
    return view[:, ::stride, ::stride][:, :oh, :ow].transpose(1, 2, 0, 3, 4)


def _by_group(op, a, a_axis, b, b_axis, groups, out_axis=0):
    """``op(a, b)``, or with ``groups`` > 1 ``op`` of each group's part of ``a`` and ``b``
    (equal parts along ``a_axis`` and ``b_axis``) concatenated along ``out_axis``: the
    docstring's definition of a grouped operation as its groups side by side."""
    if groups == 1:
        return op(a, b)
    return np.concatenate([op(pa, pb) for pa, pb in zip(np.split(a, groups, a_axis), np.split(b, groups, b_axis))],
                          axis=out_axis)


def conv_forward(x, w, stride=1, padding=0, bias=None, bias_shift=0, groups=1):
    """Exact sum of products: (OC, OH, OW). ``bias << bias_shift`` is added when given."""
    win = windows(x, w.shape[2], stride, padding)  # (OH, OW, IC, K, K)
    out = _by_group(lambda wi, wg: np.einsum("hwcij,ocij->ohw", wi, wg, optimize=True), win, 2, w, 0, groups)
    if bias is not None:
        out = out + (bias * (1 << bias_shift) if bias_shift else bias)[:, None, None]
    return out


def dilate_pad_errors(err, kernel, stride, padding, in_hw):
    """The zero-inserted, padded error map EB convolves with flipped kernels."""
    oc, oh, ow = err.shape
    h, w = in_hw
    full = np.zeros((oc, h + 2 * padding + kernel - 1, w + 2 * padding + kernel - 1), err.dtype)
    # Output pixel (y, x) covered padded-input rows y*s .. y*s+K-1; in the full map
    # it sits at row y*s + K-1 so that a K x K window at (i, j) gathers its taps.
    full[:, kernel - 1:kernel - 1 + oh * stride:stride, kernel - 1:kernel - 1 + ow * stride:stride] = err
    return full


def conv_backward(err, w, in_shape, stride=1, padding=0, groups=1):
    """Exact errors of the layer input, (IC, H, W), as a convolution with flipped kernels."""
    kernel = w.shape[2]
    _, h, wd = in_shape
    full = dilate_pad_errors(err, kernel, stride, padding, (h, wd))
    flipped = w[:, :, ::-1, ::-1]
    win = windows(full, kernel)  # (H + 2p, W + 2p, OC, K, K)
    out = _by_group(lambda wi, wg: np.einsum("hwoab,oiab->ihw", wi, wg, optimize=True), win, 2, flipped, 0, groups)
    return out[:, padding:padding + h, padding:padding + wd]


def conv_weight_grad(x, err, kernel, stride=1, padding=0, groups=1):
    """Exact weight gradients, (OC, IC / G, K, K): sum over output pixels of err * window."""
    win = windows(x, kernel, stride, padding)  # (OH, OW, IC, K, K)
    return _by_group(lambda e, wi: np.einsum("ohw,hwcij->ocij", e, wi, optimize=True), err, 0, win, 2, groups)


def conv_weight_terms(x, err, kernel, stride=1, padding=0, groups=1):
    """The terms of :func:`conv_weight_grad`, one per output pixel in raster order:
    (OH*OW, OC, IC / G, K, K), exact; their sum over the first axis is the gradient."""
    def terms(e, wi):
        t = e[:, :, :, None, None, None] * wi[None]  # (OC, OH, OW, IC, K, K)
        return np.moveaxis(t, 0, 2).reshape(-1, e.shape[0], *wi.shape[2:])

    win = windows(x, kernel, stride, padding)  # (OH, OW, IC, K, K)
    return _by_group(terms, err, 0, win, 2, groups, out_axis=1)


def bias_terms(err):
    """The terms of :func:`bias_grad`: (OH*OW, OC), raster order."""
    return err.reshape(err.shape[0], -1).T


def bias_grad(err):
    return err.sum(axis=(1, 2))


def relu_forward(x):
    return np.maximum(x, 0)


def relu_backward(err, pre_activation):
    """``err`` where the layer's input is > 0 (strictly), else 0."""
    return np.where(pre_activation > 0, err, 0)


def maxpool_forward(x, kernel, stride, padding=0):
    """Max-pool and the argmax of every window (first maximum in raster order).

    Window (r, q) of channel c covers input rows ``r*stride - padding .. + kernel - 1`` and
    the same columns, output size as for a convolution (rows and columns past the last
    window are never read). Padding cells never win: they are -inf (float) or below every
    integer (network.py allows padding <= kernel // 2, so every window holds an input cell). Of
    equal maxima the first in raster order wins (smallest window row, then column).
    Returns (y, argmax) with argmax the flat (row-major) position ``h * W + v`` in the
    unpadded (H, W) plane of each channel.
    """
    c, h, w = x.shape
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(np.int64).min
    xp = np.pad(x, ((0, 0), (padding, padding), (padding, padding)), constant_values=low)
    win = windows(xp, kernel, stride)  # (OH, OW, C, K, K)
    oh, ow = win.shape[:2]
    flat = win.reshape(oh, ow, c, kernel * kernel)
    arg = flat.argmax(axis=-1)  # numpy returns the first maximum
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0].transpose(2, 0, 1)
    ky, kx = np.divmod(arg, kernel)
    rows = np.arange(oh)[:, None, None] * stride + ky - padding
    cols = np.arange(ow)[None, :, None] * stride + kx - padding
    argmax = (rows * w + cols).transpose(2, 0, 1)
    return y, argmax


def maxpool_backward(err, argmax, in_shape):
    """Route each error to its window's maximum; overlapping windows add exactly.

    ``dx[c].flat[argmax[c, r, q]] += err[c, r, q]`` for every output, from zeros; nothing is
    saturated here (the fixed-point model saturates each element's total afterwards)."""
    c, h, w = in_shape
    out = np.zeros((c, h * w), dtype=err.dtype)
    for ch in range(c):
        np.add.at(out[ch], argmax[ch].ravel(), err[ch].ravel())
    return out.reshape(in_shape)
