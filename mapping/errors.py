"""The one exception type for user input the project refuses, and reading spec files.

Command-line entry points print its message as a single line and exit with
status 2; everything else is a bug and keeps its traceback.
"""


class SpecError(ValueError):
    """A network, cluster, mapping or option the user gave cannot be accepted."""


class MemoryRefusal(SpecError):
    """A mapping refused because the nodes' on-chip memory cannot hold it (what keeping the
    activations in DRAM may relieve: mapper.map_network, ``act_storage`` "auto")."""


def read_spec_file(path, what):
    """The parsed contents of a .toml or .json spec file; ``what`` names it in errors."""
    import json
    import tomllib
    from pathlib import Path

    path = Path(path)
    where = f"{what} file {path}"
    text = read_text(path, where)
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise SpecError(f"{where}: {error}") from None


def read_text(path, where):
    """The UTF-8 text of the file ``path``; ``where`` names it in errors."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise SpecError(f"{where}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"{where}: not UTF-8 text (byte {error.start} is 0x{error.object[error.start]:02x})") \
            from None


class Terminated(BaseException):
    """A termination request (SIGTERM), raised where the program is, so that it stops the way
    Ctrl-C stops it: the tools it runs are stopped too (hw.synth.run_tool), then one line."""


def _terminate(signum, frame):
    raise Terminated()


def run_cli(main):
    """Run ``main()``: a SpecError becomes one line on stderr and exit status 2, Ctrl-C the
    line ``interrupted`` and exit status 130 (the shell's for SIGINT), SIGTERM the line
    ``terminated`` and exit status 143."""
    import signal
    import sys
    import threading

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        return main()
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Terminated:
        print("terminated", file=sys.stderr)
        raise SystemExit(143) from None
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
