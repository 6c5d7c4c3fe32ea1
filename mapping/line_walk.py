"""The line buffer's walk over one sample (hw/memory/line_buffer.py builds it; mapping/partition/plan.py
counts its cycles): the geometry of the virtual map (input with padding and dilation) and
the row steps, one per virtual row that brings an input row and/or ends windows."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Axis:
    """One dimension (rows or columns) of the virtual map."""

    size: int         # input pixels
    kernel: int
    stride: int
    pad_before: int
    pad_after: int
    dilation: int

    @property
    def virtual(self):
        return self.pad_before + (self.size - 1) * self.dilation + 1 + self.pad_after

    @property
    def out(self):
        return (self.virtual - self.kernel) // self.stride + 1

    @property
    def first_real(self):
        return self.pad_before

    @property
    def last_real(self):
        return self.pad_before + (self.size - 1) * self.dilation

    @property
    def first_end(self):
        return self.kernel - 1

    @property
    def last_end(self):
        return (self.out - 1) * self.stride + self.kernel - 1

    @property
    def scan_start(self):
        """First virtual position a row step visits; everything before it is zero and ends no window."""
        return min(self.pad_before, self.kernel - 1)

    def real(self, v):
        """Input index at virtual position ``v``, or None for a zero row/column."""
        offset = v - self.pad_before
        if offset < 0 or offset % self.dilation or offset // self.dilation >= self.size:
            return None
        return offset // self.dilation

    def ends(self, v):
        """Whether a window ends (has its last row/column) at virtual position ``v``."""
        return self.first_end <= v <= self.last_end and (v - self.first_end) % self.stride == 0


@dataclass(frozen=True)
class RowStep:
    has_in: bool      # the row is real: take its pixels
    has_out: bool     # windows end in this row
    real: tuple       # per window row: holds a real row (else zeros)
    age: tuple        # per window row: rows written since it (0 = the incoming row)
    end: int          # last virtual column visited


def row_steps(rows, cols):
    """The row steps of one sample (see the module docstring)."""
    steps, written = [], 0
    k = rows.kernel
    for vy in range(rows.virtual):
        has_in, has_out = rows.real(vy) is not None, rows.ends(vy)
        if not (has_in or has_out):
            continue
        real, age = [], []
        for ky in range(k):
            r = rows.real(vy - k + 1 + ky)
            real.append(r is not None)
            age.append(written - r if r is not None else 0)
        end = max(cols.last_end if has_out else 0, cols.last_real if has_in else 0)
        steps.append(RowStep(has_in, has_out, tuple(real), tuple(age), end))
        written += has_in
    return steps


def walk_cycles(steps, cols):
    """Cycles of one sample's walk at one column per cycle: the steps' column counts."""
    return sum(s.end - cols.scan_start + 1 for s in steps)


def error_axis(in_size, kernel, stride, padding):
    """EB's axis over the errors of a conv output whose input has ``in_size`` pixels: the
    zero-dilated, padded error map whose stride-1 windows give one input pixel's error each."""
    out = (in_size + 2 * padding - kernel) // stride + 1
    return Axis(out, kernel, 1, kernel - 1 - padding, in_size - 1 + padding - (out - 1) * stride, stride)


def line_buffer_cycles(height, width, kernel, stride, padding, errors=False):
    """Cycles per sample of the FP/PG line buffer over a ``height x width`` input, or
    (``errors``) of the EB line buffer over the errors of that layer's output."""
    if errors:
        rows, cols = (error_axis(n, kernel, stride, padding) for n in (height, width))
    else:
        rows, cols = (Axis(n, kernel, stride, padding, padding, 1) for n in (height, width))
    return walk_cycles(row_steps(rows, cols), cols)
