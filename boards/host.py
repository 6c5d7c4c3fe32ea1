"""``python -m boards.host --port /dev/ttyUSB0``: train on a board through its UART.

A chain across boards (each built with ``python -m boards.build --node N``, joined by their
link cables): one ``--port`` per board, in chain order. Checks that the boards hold the
mapping's nodes, loads the initial weights, streams the
samples, waits for the last weight update, reads every weight back, compares with the
golden model (``--check``) and saves them (``--save``). The mapping is the one the
bitstream was built from (``--mapping``, as ``python -m boards.build`` writes it, or
``--board`` with ``--network``/``--cluster`` mapped the same way). Samples: ``--data``
(an .npz with ``inputs`` (N, C, H, W) in [0, 1) and ``labels``) or ``--samples N``
random ones with initial weights from ``--seed``.
"""

import sys
import time
from types import SimpleNamespace

import numpy as np

from hw.base.checks import never_elaborated
from hw.node import Node
from mapping import golden
from mapping.cli import LOSS_HELP, DefaultsShown, Parser, add_loss_option, add_update_option, positive_int
from mapping.errors import SpecError, run_cli

from .boards import get_board
from .build import board_mapping
from .client import BoardError, Client


def parse_args(argv):
    parser = Parser(prog="python -m boards.host", description=__doc__.splitlines()[0].split(": ", 1)[1],
                    formatter_class=DefaultsShown)
    parser.add_argument("--port", required=True, action="append",
                        help="the board's serial port; for a chain across boards, one --port per board in "
                             "chain order (the board with node 0 first)")
    parser.add_argument("--board", required=True, help="the board (its UART rate and device)")
    parser.add_argument("--mapping", help="the mapping JSON the bitstream was built from")
    parser.add_argument("--network", help="network (without --mapping)")
    parser.add_argument("--cluster", help="cluster (without --mapping)")
    add_loss_option(parser, default=None, help=f"{LOSS_HELP} (without --mapping: mse)")
    add_update_option(parser, default=None, help="the --update the bitstream was built with (without --mapping: "
                                                  "auto)")
    parser.add_argument("--data", help=".npz file with inputs and labels")
    parser.add_argument("--samples", type=positive_int, default=12, help="random samples (without --data)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random samples and initial weights")
    parser.add_argument("--check", action="store_true", help="compare the trained weights with the golden model")
    parser.add_argument("--save", help="write the trained weights to this .npz")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    board = get_board(args.board)
    mapping = board_mapping(SimpleNamespace(network=args.network, cluster=args.cluster, mapping=args.mapping,
                                            loss=args.loss, update=args.update), board)
    from mapping.zoo import get
    network = get(mapping.network)
    inputs, labels, params = golden.random_data(network, args.samples, args.seed)
    if args.data:
        try:
            data = np.load(args.data)
            inputs, labels = data["inputs"], data["labels"]
        except (OSError, KeyError, ValueError) as error:
            raise SpecError(f"--data {args.data}: {error}") from None
    import serial
    ports = []
    for name in args.port:
        try:
            ports.append(serial.Serial(name, board.uart_baud, timeout=10))
        except serial.SerialException as error:
            raise SpecError(f"cannot open {name}: {error}") from None
    started = time.monotonic()
    nodes = [never_elaborated(Node(config)) for config in mapping.nodes]  # for their memory layouts
    client = Client([_SerialTransport(port) for port in ports], mapping, nodes,
                    progress=lambda text: print(f"[{time.monotonic() - started:7.1f} s] {text}", flush=True))
    try:
        client.check()
        client.load(params)
        status = client.train(inputs, labels)
        final = client.read_back(params)
    except BoardError as error:
        raise SpecError(str(error)) from None
    formats = mapping.nodes[0].formats
    print(f"trained {len(inputs)} samples: loss {status.loss(formats.act_frac):.4f}, cycles per node "
          f"{[node['cycles'] for node in status.nodes]}, frames refused {status.frame_errors}")
    if args.save:
        np.savez(args.save, **{f"{name}_weights": w for name, (w, _) in final.items()},
                 **{f"{name}_bias": b for name, (_, b) in final.items() if b is not None})
    if args.check:
        from mapping.golden import train
        expected, _ = train(network, params, inputs, labels, batch=mapping.nodes[0].training.batch,
                            lr=mapping.nodes[0].training.lr, mode="fixed", formats=formats,
                            fp_stale=mapping.fp_stale(), eb_stale=mapping.eb_stale())
        wrong = [name for name, (w, b) in expected.items()
                 if not np.array_equal(final[name][0], w) or (b is not None and not np.array_equal(final[name][1], b))]
        if wrong:
            print(f"the board's weights differ from the golden model's in {', '.join(wrong)}", file=sys.stderr)
            return 1
        print("bit-exact with the golden model")
    return 0


class _SerialTransport:
    def __init__(self, port):
        self.port = port

    def write(self, data):
        self.port.write(data)

    def read(self, count):
        data = self.port.read(count)
        if len(data) < count:
            raise BoardError(f"the board answered {len(data)} of {count} bytes within {self.port.timeout} s")
        return data


if __name__ == "__main__":
    sys.exit(run_cli(main))
