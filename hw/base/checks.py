"""Constructor parameter checks shared by every block."""

from mapping.devices import FAMILIES


def refuse(component, message):
    """Refuse a constructor parameter: ValueError, without Amaranth's "created but never
    used" warning for the half-built component (it would bury the real message)."""
    component._MustUse__silence = True
    raise ValueError(message)


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
