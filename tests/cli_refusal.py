"""Running a command-line tool's main() in the test process, as ``python -m`` runs it."""

import pytest

from mapping.errors import run_cli


def refusal(main, argv, capsys, status=2):
    """The one line ``main(argv)`` prints on stderr under run_cli, which must exit with ``status``."""
    with pytest.raises(SystemExit) as exit:
        run_cli(lambda: main(argv))
    assert exit.value.code == status
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.strip()


# Option values both CLIs refuse (they share the checks of mapping/cli.py): argv, message.
BAD_OPTIONS = [
    (["--bram-fraction", "0"], "argument --bram-fraction: must be above 0 and at most 1, got '0'"),
    (["--bram-fraction", "1.5"], "argument --bram-fraction: must be above 0 and at most 1, got '1.5'"),
    (["--batch", "0"], "argument --batch: must be a positive integer, got '0'"),
    (["--lr", "nan"], "argument --lr: must be a positive finite number, got 'nan'"),
    (["--lr", "inf"], "argument --lr: must be a positive finite number, got 'inf'"),
    (["--lr", "-0.1"], "argument --lr: must be a positive finite number, got '-0.1'"),
    (["--loss", "softmax"], "argument --loss: invalid choice: 'softmax' (choose from 'mse', 'ce')"),
    (["--act-storage", "disk"], "argument --act-storage: invalid choice: 'disk' (choose from 'chip', 'dram', 'auto')"),
    (["--vector-words", "0"], "argument --vector-words: must be a positive integer, got '0'"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
]


# A network whose max-pool is padded (kernel 3, stride 2, padding 1): the generator's SFU does not build it.
PADDED_POOL = """name = "padded"
input = [1, 8, 8]
layers = [{type = "conv2d", out_channels = 4, kernel = 3, padding = 1}, {type = "relu"},
          {type = "maxpool", kernel = 3, stride = 2, padding = 1}, {type = "flatten"},
          {type = "linear", out_features = 10}]
"""

# What both CLIs say about it.
PADDED_POOL_REFUSAL = ("layer 'conv2d0': max-pool padding 1 is not supported by the generator's SFU "
                       "(only padding 0)")


# A grouped first layer (2 input channels, so OCP): the generator builds grouped ICP layers only.
OCP_GROUPED = """name = "ocp-grouped"
input = [2, 8, 8]
layers = [{type = "conv2d", out_channels = 6, kernel = 3, padding = 1, groups = 2}, {type = "relu"},
          {type = "flatten"}, {type = "linear", out_features = 10}]
"""

OCP_GROUPED_REFUSAL = ("layer 'conv2d0': grouped convolution (groups=2) under OCP is not built by the hardware "
                       "generator (python -m mapping maps it without --for-hardware)")


def bad_network_files(folder):
    """(a network file that is not UTF-8, a network with a padded max-pool) in ``folder``."""
    latin, padded = folder / "latin.toml", folder / "padded.toml"
    latin.write_bytes(b'name = "r\xe9seau"\n')
    padded.write_text(PADDED_POOL)
    return latin, padded
