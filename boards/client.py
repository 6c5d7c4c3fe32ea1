"""The host's side of boards/protocol.py: load weights, train, read back, over any transport.

A transport has ``write(data)`` and ``read(count)`` (returns ``count`` bytes or raises
TimeoutError): a serial port (boards/host.py) or a simulated board (boards/simulated.py).
A chain across boards has one transport per board, in chain order: each board answers for
the nodes it holds, the first takes the samples, the last scores them.
"""

from dataclasses import replace

import numpy as np

from mapping import numerics

from . import protocol as p


class BoardError(Exception):
    pass


# STATUS reads without any node taking a sample or applying an update after which the chain is
# taken to have stopped: about 0.4 s on a board at 3 Mbaud, where a sample takes microseconds.
STALL_READS = 1000


class Client:
    """Talks to the host interfaces of the boards built for ``mapping`` (its NodeConfigs):
    ``transports``, one per board in chain order; ``nodes``: hw.node.Node objects of the
    configs the boards hold, in chain order (for their memory layouts)."""

    def __init__(self, transports, mapping, nodes, progress=None, retries=3, stall_reads=STALL_READS):
        self.transports, self.mapping, self.nodes = list(transports), mapping, nodes
        self.progress = progress or (lambda text: None)
        self.retries, self.stall_reads = retries, stall_reads
        self.held = None  # per board, the range of nodes it holds (from INFO)

    def request(self, command, payload=b"", board=0):
        """Send one frame to ``board`` and return the answer's payload; a frame the board
        refused for its CRC (a bit flipped on the wire) is sent again."""
        transport = self.transports[board]
        for _ in range(self.retries + 1):
            transport.write(p.frame(command, payload))
            code, answer = self._receive(transport)
            if code == p.NAK and answer[:1] == bytes([p.NakReason.CRC_ERROR.value]):
                continue
            if code == p.NAK:
                raise BoardError(f"board {board} refused command 0x{command:02x}: {p.nak_reason(answer)}")
            if code != command | p.REPLY:
                raise BoardError(f"answer 0x{code:02x} to command 0x{command:02x}")
            return answer
        raise BoardError(f"command 0x{command:02x}: {self.retries + 1} CRC errors in a row")

    @staticmethod
    def _receive(transport):
        data = transport.read(p.HEADER_BYTES)
        length = int.from_bytes(data[2:4], "little")
        data += transport.read(length + 2)
        (frame,), _ = p.parse_frames(data)
        return frame

    def check(self):
        """The boards hold the mapping's nodes, in order, with their memories, and every link
        between them is up, or BoardError."""
        held, following = [], 0
        for board in range(len(self.transports)):
            info = self.request(p.Command.INFO, board=board)
            first, count, memories = info[0], info[1], list(info[2:])
            if first != following:
                raise BoardError(f"board {board} holds nodes {first}..{first + count - 1}, expected node "
                                 f"{following} next: give the boards' ports in chain order")
            expected = [len(node.memories) for node in self.nodes[first:first + count]]
            if memories != expected:
                raise BoardError(f"board {board} holds nodes {first}..{first + count - 1} with {memories} weight "
                                 f"memories, the mapping {expected}: built for another mapping")
            held.append(range(first, first + count))
            following += count
        if following != len(self.nodes):
            raise BoardError(f"the boards hold nodes 0..{following - 1}, the mapping has {len(self.nodes)}")
        self.held = held
        for board, links_up in enumerate(self.status().links_up):
            for bit, side, neighbour in ((0, "up", board - 1), (1, "down", board + 1)):
                if not links_up >> bit & 1:
                    raise BoardError(f"board {board}'s {side} link is down: is the cable to board {neighbour} "
                                     f"in, pin for pin as link_pins.txt says, and is that board configured?")

    def _board(self, node):
        """(board, index on that board) of chain node ``node``."""
        if self.held is None:
            self.check()
        board = next(b for b, nodes in enumerate(self.held) if node in nodes)
        return board, node - self.held[board].start

    def _memories(self):
        return [(n, k, ram) for n, node in enumerate(self.nodes) for k, ram in enumerate(node.memories)]

    def load(self, params):
        """Write every weight memory of every node from ``params`` (golden layout)."""
        chunk = (p.MAX_PAYLOAD - p.WRITE_HEADER) // 2
        memories = self._memories()
        for done, (n, k, ram) in enumerate(memories):
            flat = [word for row in self.nodes[n].memory_rows(k, params) for word in row]
            for start in range(0, len(flat), chunk):
                board, local = self._board(n)
                self.request(p.Command.WRITE, self._where(local, k, ram, start) + p.words(flat[start:start + chunk]), board)
            self.progress(f"loaded memory {done + 1}/{len(memories)} (node {n}, {ram.rows} x "
                          f"{ram.banks * ram.words} words)")

    @staticmethod
    def _where(n, k, ram, offset):
        """WRITE's and READ's node, memory, address and lane of word ``offset`` of a memory."""
        addr, lane = divmod(offset, ram.banks * ram.words)
        return bytes([n, k]) + addr.to_bytes(2, "little") + lane.to_bytes(2, "little")

    def read_back(self, params):
        """``params`` (golden layout) with every word the nodes' memories hold now."""
        params = {name: (w.copy(), None if b is None else b.copy()) for name, (w, b) in params.items()}
        chunk = p.MAX_PAYLOAD // 2
        for n, k, ram in self._memories():
            size = ram.rows * ram.banks * ram.words
            flat = []
            for start in range(0, size, chunk):
                count = min(chunk, size - start)
                board, local = self._board(n)
                flat += p.unwords(self.request(p.Command.READ, self._where(local, k, ram, start) + count.to_bytes(2, "little"),
                                               board))
            self.nodes[n].store_memory(k, np.reshape(flat, (ram.rows, -1)), params)
        return params

    def status(self):
        """Every board's STATUS as one: the nodes in chain order, the loss of the last board
        (which scores the samples), flags and frame errors of any board."""
        if self.held is None:
            self.check()
        parts = [p.Status.unpack(self.request(p.Command.STATUS, board=board), len(nodes))
                 for board, nodes in enumerate(self.held)]
        last = parts[-1]
        return replace(last, training=any(part.training for part in parts), error=any(part.error for part in parts),
                       links_up=[part.links_up for part in parts],
                       frame_errors=sum(part.frame_errors for part in parts),
                       nodes=[node for part in parts for node in part.nodes])

    def _every_board(self, command, payload=b""):
        for board in range(len(self.transports)):
            self.request(command, payload, board)

    def train(self, inputs, labels, report_every=None):
        """Stream ``inputs`` (real values, (samples, C, H, W)) and ``labels`` into node 0 and wait
        until every node has applied every mini-batch update. Returns the last Status.
        ``report_every``: samples between progress reports (default a tenth of the run)."""
        config = self.mapping.nodes[0]
        samples, batch = len(inputs), config.training.batch
        updates = samples // batch
        # From the chain's reset state (the weights keep their values), whatever ran before.
        self.stop()
        self._every_board(p.Command.START, samples.to_bytes(4, "little") + updates.to_bytes(4, "little"))
        images = numerics.quantize(np.asarray(inputs), config.formats.act_frac)
        channels = images.shape[1]
        chunk = (p.MAX_PAYLOAD // 2) // channels * channels  # whole pixels per frame
        for s in range(samples):
            self.request(p.Command.LABEL, p.words([int(labels[s])]))
            pixels = [int(v) for v in images[s].transpose(1, 2, 0).reshape(-1)]
            for start in range(0, len(pixels), chunk):
                self.request(p.Command.IMAGE, p.words(pixels[start:start + chunk]))
            if (s + 1) % (report_every or max(1, samples // 10)) == 0:
                status = self.status()
                self.progress(f"sample {s + 1}/{samples} sent; updates per node "
                              f"{[node['updates'] for node in status.nodes]}, loss "
                              f"{status.loss(config.formats.act_frac):.4f} over {status.loss_samples} samples")
        counters, unchanged = None, 0
        while True:
            status = self.status()
            if all(node["updates"] >= updates for node in status.nodes):
                return status
            now = [(node["samples"], node["updates"]) for node in status.nodes]
            unchanged = unchanged + 1 if now == counters else 0
            counters = now
            if unchanged == self.stall_reads:
                raise BoardError(f"the chain stopped before its last update: samples and updates per node "
                                 f"{now} unchanged over {self.stall_reads} status reads (a link down?)")

    def stop(self):
        self._every_board(p.Command.STOP)
