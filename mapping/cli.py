"""What the two command-line tools (``python -m mapping``, ``python -m hw.build``) share:
an argument parser whose mistakes are one-line refusals, option value checks, and the
output folder."""

import argparse
from contextlib import contextmanager
import math
from pathlib import Path

from .devices import DEVICES
from .errors import SpecError
from .mapper import ACT_STORAGE_POLICIES, NARROW_PSUM_BITS, OVERLAPPED_MIN_GAIN, UPDATE_POLICIES
from .nodeconfig import VECTOR_WORDS
from .numerics import ACC_BITS, GRAD_BITS, LOSSES, PSUM_BITS, Formats


class Parser(argparse.ArgumentParser):
    """argparse, refusing a bad command line as a SpecError (one line, exit status 2 under
    :func:`mapping.errors.run_cli`) instead of printing the usage."""

    def error(self, message):
        raise SpecError(f"{message} (see {self.prog} --help)")


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, where it has one."""

    def _get_help_string(self, action):
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got '{text}'")
    return value


def jobs_count(text):
    """A --jobs value: a count of worker processes, 0 for every usable core."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (every core) or a positive integer, got '{text}'")
    return value


def int_list(choices=None):
    """An argparse type: comma-separated integers, each one of ``choices`` (if given), none twice."""
    def parse(text):
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be comma-separated integers, got '{text}'") from None
        for value in values:
            if choices is not None and value not in choices:
                raise argparse.ArgumentTypeError(f"{value} is not one of {', '.join(map(str, choices))}")
            if values.count(value) > 1:
                raise argparse.ArgumentTypeError(f"{value} is listed twice in '{text}'")
        return values
    return parse


def add_jobs_option(parser, what):
    """``--jobs``: how many of ``what`` run at once, in worker processes (mapping/parallel.py)."""
    parser.add_argument("--jobs", type=jobs_count, default=1,
                        help=f"how many {what} at once, each in a worker process (0: every core)")


def _number(text):
    """``text`` as a float, NaN where it is none (every range check then fails)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def positive_number(text):
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got '{text}'")
    return value


def fraction(text):
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got '{text}'")
    return value


UPDATE_HELP = ("how the weight update runs: stop (the engines wait for each update's walk), overlapped (beside "
               "the engines: three copies of each slice's weights and two gradient sums, every layer one sample "
               "staler and EB one sample behind; docs/weight_versions.md), or auto: overlapped where the "
               f"generated chain then runs at least {round((OVERLAPPED_MIN_GAIN - 1) * 100)}%% faster, its walks counted, "
               "else stop (a model-only mapping counts no walks: stop)")


def add_update_option(parser, default="auto", help=UPDATE_HELP):
    """``--update``: map_network's ``update``."""
    parser.add_argument("--update", choices=UPDATE_POLICIES, default=default, help=help)


LOSS_HELP = "the last node's loss: mse on the raw scores, or ce (softmax cross-entropy)"


def add_loss_option(parser, default="mse", help=LOSS_HELP):
    """``--loss``, the one formats option the command-line tools expose."""
    parser.add_argument("--loss", choices=LOSSES, default=default, help=help)


GRAD_BITS_HELP = (f"width of the gradient sums (LGB, BGB): {ACC_BITS} is exact, narrower rounds each term "
                  f"stochastically into a saturating sum (docs/numerics.md)")


def add_grad_bits_option(parser, default=ACC_BITS, help=GRAD_BITS_HELP):
    """``--grad-bits``: Formats.grad_bits, with its default fractional bits."""
    parser.add_argument("--grad-bits", type=int, choices=GRAD_BITS, default=default, help=help)


PSUM_BITS_HELP = (f"width of the partial sums between the slices of a layer: {ACC_BITS} is exact, "
                  f"{NARROW_PSUM_BITS} saturates them as they leave a slice; default: {ACC_BITS} unless the chain "
                  f"is link bound and {NARROW_PSUM_BITS} maps faster (docs/numerics.md)")


def add_psum_bits_option(parser):
    """``--psum-bits``: Formats.psum_bits; None (not given) for the mapper's default
    (:func:`mapping.mapper.with_default_partial_sums`)."""
    parser.add_argument("--psum-bits", type=int, choices=PSUM_BITS, default=None, help=PSUM_BITS_HELP)


ACT_STORAGE_HELP = ("where the Act-RAMs and SFU masks keep the samples in flight: chip (block RAM), dram (the "
                    "node's DRAM behind small staging FIFOs, on devices with DRAM), or auto: on chip unless the "
                    "mapping is refused so, then in DRAM (docs/nodeconfig.md)")


FC_WEIGHTS_HELP = ("where fully connected weights live: dram streams them once per sample from the DRAM of "
                   "every device that has one (the generator builds that at mini-batch 1), chip keeps them on "
                   "chip, auto keeps them on chip where that maps")


def add_fc_weights_option(parser, default="auto", help=FC_WEIGHTS_HELP):
    """``--fc-weights``: map_network's ``fc_weights``."""
    parser.add_argument("--fc-weights", choices=ACT_STORAGE_POLICIES, default=default, help=help)


def fc_weights_problem(mapping, policy):
    """Why ``mapping`` does not keep fully connected weights where ``policy`` (--fc-weights)
    asked, or None: "dram" with no fully connected slice on a device with DRAM."""
    if policy != "dram" or any(s.weights_offchip for node in mapping.nodes for s in node.slices):
        return None
    with_dram = ", ".join(sorted(name for name, device in DEVICES.items() if device.dram_gb > 0))
    return (f"--fc-weights dram: no fully connected slice of the mapping on cluster '{mapping.cluster}' is on a "
            f"device with DRAM (devices with DRAM: {with_dram})")


VECTOR_WORDS_HELP = ("the widest output vector a fully connected layer hands on as one stream word; a wider one "
                     "travels as the pixels of a map, its errors a group of the engines' P a beat (docs/design.md)")


def add_vector_words_option(parser, default=VECTOR_WORDS, help=VECTOR_WORDS_HELP):
    """``--vector-words``: map_network's ``vector_words``."""
    parser.add_argument("--vector-words", type=positive_int, default=default, help=help)


def add_act_storage_option(parser, default="auto", help=ACT_STORAGE_HELP):
    """``--act-storage``: map_network's ``act_storage``."""
    parser.add_argument("--act-storage", choices=ACT_STORAGE_POLICIES, default=default, help=help)


DEFAULT_GRAD_BITS_HELP = (f"{GRAD_BITS_HELP}; default: {ACC_BITS} where the cluster has the memory and links "
                          f"for it, else 16 at mini-batch 1 and 24 above (docs/numerics.md)")


def formats_of(loss, grad_bits=None, psum_bits=None):
    """The number formats a mapping made with ``--loss``, ``--grad-bits`` and ``--psum-bits``
    carries (None, for all: the mapper's default)."""
    given = {key: value for key, value in (("loss", loss), ("grad_bits", grad_bits), ("psum_bits", psum_bits))
             if value is not None}
    return Formats(**given) if given else None


@contextmanager
def output_folder(path, option="--out"):
    """The folder ``path`` for a run's outputs, created (with its parents) now so that a path
    that cannot hold them is refused before any work; if the run fails, the folders it
    created and left empty are removed again."""
    path = Path(path)
    created = [p for p in (path, *path.parents) if not p.exists()]
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise SpecError(f"{option} {path}: {'it' if existing == path else existing} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError as error:
        _remove_empty(created)
        raise SpecError(f"{option} {path}: cannot write there ({error.strerror})") from None
    try:
        yield path
    except BaseException:
        _remove_empty(created)
        raise


def _remove_empty(folders):
    """Remove ``folders`` (deepest first) while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return
