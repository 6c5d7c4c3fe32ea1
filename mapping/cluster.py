"""Clusters: a 1-D chain of devices with a link bandwidth per neighbour pair.

A cluster comes from a short spec or from a file:

- ``vc709:15``                  fifteen VC709 boards
- ``u50lv+u30``                 a chain of different devices, in chain order
- ``vc709:3+ecp5-85:2``         counts and mixing combine
- ``vc709:15@150``              ``@GBPS`` sets every link (per direction, Gb/s)
- ``path/to/cluster.toml``      (or ``.json``) with

      link_gbps = 150                 # optional: every link; or
      links = [20.0, 8.0, 8.0]        # optional: one per neighbour pair
      [[devices]]
      name = "vc709"
      count = 3                       # optional, default 1

Without a bandwidth, a pair's link runs at the smaller of the two devices'
``link_gbps`` (the slower end's ports limit it).
"""

from dataclasses import dataclass
import math
import re
from pathlib import Path

from .devices import Device, get_device
from .errors import SpecError, read_spec_file

_TERM = re.compile(r"^([A-Za-z0-9_.-]+)(?::(.*))?$")


@dataclass(frozen=True)
class Cluster:
    devices: tuple[Device, ...]   # chain order
    link_gbps: tuple[float, ...]  # per neighbour pair (len = n-1), per direction, Gb/s
    spec: str                     # the text or file it was parsed from

    def __len__(self):
        return len(self.devices)

    def __getitem__(self, index):
        return self.devices[index]

    def __iter__(self):
        return iter(self.devices)

    def neighbour_gbps(self, node):
        """(to predecessor, to successor) bandwidth of ``node``; None at the chain's ends."""
        before = self.link_gbps[node - 1] if node > 0 else None
        after = self.link_gbps[node] if node < len(self.devices) - 1 else None
        return before, after

    def __str__(self):
        runs, previous = [], None
        for device in self.devices:
            if device is previous:
                runs[-1][1] += 1
            else:
                runs.append([device, 1])
            previous = device
        return " + ".join(f"{count} x {device}" for device, count in runs)


def _default_links(devices):
    return tuple(min(a.link_gbps, b.link_gbps) for a, b in zip(devices, devices[1:]))


def _bandwidth(value, what):
    """A positive, finite number of Gb/s; ``value`` may be text from a spec."""
    try:
        gbps = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        gbps = math.nan
    if not (math.isfinite(gbps) and gbps > 0):
        raise SpecError(f"{what} must be a positive number of Gb/s, got {value!r}")
    return gbps


def _count(value, what):
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"{what} must be a positive integer, got {value!r}")
    return value


def _chain(entries, where):
    """Expand (name, count, field) entries into the chain of devices.

    ``field`` says where the entry came from ("devices[1]" in a file, "" in a
    short spec) so that a refusal points at it.
    """
    devices = []
    for name, count, field in entries:
        try:
            device = get_device(name)
        except SpecError as error:
            raise SpecError(f"{where}: {field + '.name: ' if field else ''}{error}") from None
        what = f"{field}.count" if field else f"count of '{name}'"
        devices += [device] * _count(count, f"{where}: {what}")
    return tuple(devices)


def _with_links(devices, link_gbps, links, spec, where):
    if links is not None:
        if link_gbps is not None:
            raise SpecError(f"{where}: give either link_gbps or links, not both")
        if not isinstance(links, (list, tuple)):
            raise SpecError(f"{where}: links must be a list of Gb/s, got {links!r}")
        if len(links) != len(devices) - 1:
            given = f"{len(links)} bandwidth{'' if len(links) == 1 else 's'}"
            raise SpecError(f"{where}: links gives {given} but a chain of "
                            f"{len(devices)} devices has {len(devices) - 1} neighbour pairs")
        bandwidths = tuple(_bandwidth(value, f"{where}: links[{i}]")
                           for i, value in enumerate(links))
    elif link_gbps is not None:
        bandwidths = (_bandwidth(link_gbps, f"{where}: link_gbps"),) * (len(devices) - 1)
    else:
        bandwidths = _default_links(devices)
    return Cluster(devices, bandwidths, spec)


def _parse_text(spec):
    where = f"cluster '{spec}'"
    text, at, gbps = spec.strip().partition("@")
    if at and not gbps.strip():
        raise SpecError(f"{where}: '@' must be followed by a link bandwidth in Gb/s")
    entries = []
    for term in text.split("+"):
        if not term.strip():
            raise SpecError(f"{where}: empty device name between '+' signs")
        match = _TERM.match(term.strip())
        if not match:
            raise SpecError(f"{where}: cannot read '{term.strip()}'; expected DEVICE or "
                            f"DEVICE:COUNT joined by '+', optionally ending in @GBPS")
        name, count = match.groups()
        entries.append((name, 1 if count is None else count, ""))
    devices = _chain(entries, where)
    bandwidth = _bandwidth(gbps.strip(), f"{where}: link bandwidth after '@'") if at else None
    return _with_links(devices, bandwidth, None, spec, where)


def first_device_name(spec):
    """The first device of a short cluster spec as written (``vc709`` for ``vc709:15@150``);
    None for a cluster file or a spec that does not parse."""
    if Path(spec.strip()).suffix in (".toml", ".json"):
        return None
    match = _TERM.match(spec.strip().partition("@")[0].split("+")[0].strip())
    return match.group(1) if match else None


_FILE_KEYS = {"devices", "link_gbps", "links"}
_ENTRY_KEYS = {"name", "count"}


def from_dict(data, spec, where):
    """Build a cluster from the parsed form of a cluster file."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a table with 'devices'")
    unknown = set(data) - _FILE_KEYS
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} "
                        f"(known: {', '.join(sorted(_FILE_KEYS))})")
    entries = data.get("devices")
    if not isinstance(entries, list) or not entries:
        raise SpecError(f"{where}: 'devices' must be a non-empty list of {{name, count}} entries")
    chain = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry:
            raise SpecError(f"{where}: devices[{i}] needs a 'name'")
        unknown = set(entry) - _ENTRY_KEYS
        if unknown:
            raise SpecError(f"{where}: devices[{i}] has unknown field(s) "
                            f"{', '.join(sorted(unknown))}")
        chain.append((entry["name"], entry.get("count", 1), f"devices[{i}]"))
    devices = _chain(chain, where)
    return _with_links(devices, data.get("link_gbps"), data.get("links"), spec, where)


def load(path):
    """Load a cluster from a .toml or .json file."""
    data = read_spec_file(path, "cluster")
    return from_dict(data, str(path), f"cluster file {path}")


def parse_cluster(spec):
    """A cluster from a short spec (``vc709:15``, ``u50lv+u30@24``) or a .toml/.json path."""
    if isinstance(spec, Cluster):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"cluster spec must be text such as 'vc709:15', got {spec!r}")
    if Path(spec.strip()).suffix in (".toml", ".json"):
        return load(spec.strip())
    return _parse_text(spec)
