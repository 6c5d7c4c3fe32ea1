"""Constructor parameter checks shared by every block."""


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
