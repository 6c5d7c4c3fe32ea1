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
