"""Stability margin of the pipelined (stale) weight update.

Gradient descent on a quadratic of curvature ``lam`` whose gradient is ``tau`` updates
old, ``x[t+1] = x[t] - lr * lam * x[t - tau]``, converges only while
``lr * lam < 2 sin(pi / (2 (2 tau + 1)))`` (2 for aligned SGD, 1 at tau = 1, 0.35 at
tau = 4). With ``fp_stale = k`` samples and mini-batches of ``B``, FP of a sample runs
on weights up to ``ceil(k / B)`` updates old (docs/weight_versions.md), so that delay
and the largest curvature of one sample's loss at the start of training (estimated here
by power iteration on finite-difference Hessian-vector products of the golden model's
float gradients) tell whether a learning rate is safe.
"""

from dataclasses import dataclass
import math

import numpy as np

from . import golden
from .numerics import Formats


def delay_bound(tau):
    """Largest lr * curvature for which gradient descent delayed by ``tau`` updates converges."""
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def update_delay(fp_stale, batch):
    """Updates between the weights FP and EB use, at worst, over every layer."""
    return max((-(-k // batch) for k in fp_stale.values()), default=0)


def _flat_grad(network, params, image, label, arith):
    trace = golden.forward(network, params, image, arith, 0)
    grads, _ = golden.backward(network, params, trace, label, arith, 0)
    return np.concatenate([g.ravel() for name in params for g in grads[name] if g is not None])


def _unflatten(params, vector):
    out, at = {}, 0
    for name, pair in params.items():
        parts = []
        for value in pair:
            if value is None:
                parts.append(None)
                continue
            parts.append(vector[at:at + value.size].reshape(value.shape))
            at += value.size
        out[name] = tuple(parts)
    return out


def _shifted(params, direction, eps):
    return {name: tuple(None if v is None else v + eps * d for v, d in zip(pair, direction[name]))
            for name, pair in params.items()}


def top_curvature(network, params, image, label, rng, iterations=20, eps=1e-6, loss="mse"):
    """Largest Hessian eigenvalue (by magnitude) of one sample's ``loss`` at float ``params``."""
    arith = golden.arithmetic("float", Formats(loss=loss))
    size = sum(v.size for pair in params.values() for v in pair if v is not None)
    v = rng.normal(size=size)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iterations):
        d = _unflatten(params, v)
        # One-sided: pre-activations that are exactly 0 at ``params`` (zero biases on blank
        # pixels) switch the same way at eps and 2 eps, so the difference stays in one
        # linear region of the ReLUs and pools.
        hv = (_flat_grad(network, _shifted(params, d, 2 * eps), image, label, arith)
              - _flat_grad(network, _shifted(params, d, eps), image, label, arith)) / eps
        lam = float(v @ hv)
        norm = np.linalg.norm(hv)
        if norm == 0:
            return 0.0
        v = hv / norm
    return abs(lam)


@dataclass
class Margin:
    curvature: float   # largest over the probed samples
    lr: float
    delay: int         # updates
    bound: float       # delay_bound(delay)

    @property
    def product(self):
        return self.lr * self.curvature

    @property
    def margin(self):
        """bound / (lr * curvature): above 1 is inside the stability bound."""
        return self.bound / self.product if self.product else math.inf

    def __str__(self):
        return (f"stability: lr * largest curvature = {self.lr:g} * {self.curvature:.3g} = {self.product:.3g}, "
                f"bound for a {self.delay}-update delay {self.bound:.3g}, margin {self.margin:.2f}")


def margin(network, params, images, labels, *, lr, fp_stale, batch, rng, loss="mse"):
    """The :class:`Margin` of training float ``params`` at ``lr`` with ``fp_stale`` and ``batch``,
    the curvature of ``loss`` the largest over ``images``."""
    curvature = max(top_curvature(network, params, x, y, rng, loss=loss) for x, y in zip(images, labels))
    delay = update_delay(fp_stale, batch)
    return Margin(curvature, lr, delay, delay_bound(delay))
