"""The one exception type for user input the project refuses, and reading spec files.

Command-line entry points print its message as a single line and exit with
status 2; everything else is a bug and keeps its traceback.
"""


class SpecError(ValueError):
    """A network, cluster, mapping or option the user gave cannot be accepted."""


def read_spec_file(path, what):
    """The parsed contents of a .toml or .json spec file; ``what`` names it in errors."""
    import json
    import tomllib
    from pathlib import Path

    path = Path(path)
    where = f"{what} file {path}"
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"{where}: {error.strerror}") from None
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise SpecError(f"{where}: {error}") from None


def run_cli(main):
    """Run ``main()`` and turn a SpecError into one line on stderr and exit status 2."""
    import sys

    try:
        return main()
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
