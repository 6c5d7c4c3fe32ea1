"""Constructor parameter checks shared by every block, and the silencing of Amaranth's
"never used" warning for components built but deliberately not elaborated."""

from amaranth.hdl import Elaboratable

from mapping.devices import FAMILIES


def refuse(component, message):
    """Refuse a constructor parameter: ValueError, without Amaranth's "created but never
    used" warning for the half-built component (it would bury the real message)."""
    never_elaborated(component)
    raise ValueError(message)


def built_elaboratables(component):
    """``component`` and every elaboratable it built in its constructor, reached through its
    attributes (and the lists, tuples and dicts among them), each once."""
    seen, pending = set(), [component]
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Elaboratable):
            yield item
            pending.extend(vars(item).values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())


def never_elaborated(component):
    """``component``, built for what it knows (a host tool's memory layouts) and never
    elaborated: without Amaranth's "created but never used" warning for it and for every
    component it built in its constructor."""
    for item in built_elaboratables(component):
        item._MustUse__silence = True
    return component


def positive(component, block, **sizes):
    """Refuse any of ``sizes`` (a block's constructor parameters) below 1."""
    for name, value in sizes.items():
        if value < 1:
            refuse(component, f"{block}: {name} = {value} must be at least 1")


def check_family(component, family):
    """The target is explicit: None (simulation) or a device family of mapping.devices; a
    misspelt family must not quietly build the portable simulation models instead."""
    if family is not None and family not in FAMILIES:
        refuse(component, f"unknown device family {family!r} (known: {', '.join(FAMILIES)}; "
                          f"None simulates)")
