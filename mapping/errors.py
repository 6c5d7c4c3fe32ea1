"""The one exception type for user input the project refuses.

Command-line entry points print its message as a single line and exit with
status 2; everything else is a bug and keeps its traceback.
"""


class SpecError(ValueError):
    """A network, cluster, mapping or option the user gave cannot be accepted."""


def run_cli(main):
    """Run ``main()`` and turn a SpecError into one line on stderr and exit status 2."""
    import sys

    try:
        return main()
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
