"""Independent jobs on worker processes (mapping/parallel.py) and the sweeps that use them."""

import json
import os

import pytest

from mapping.__main__ import main
from mapping.parallel import check_jobs, run_jobs, usable_cores


def _square_and_pid(x):
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x * x, os.getpid()


def test_jobs_on_two_workers_come_back_in_order_from_other_processes():
    seen = []
    results = run_jobs(_square_and_pid, [(x,) for x in range(6)], jobs=2,
                       progress=lambda done, total, index, result: seen.append((done, total, index, result[0])))
    assert [square for square, _ in results] == [x * x for x in range(6)]
    assert os.getpid() not in {pid for _, pid in results}
    assert [done for done, *_ in seen] == list(range(1, 7)) and {total for _, total, *_ in seen} == {6}
    assert sorted((index, square) for *_, index, square in seen) == [(x, x * x) for x in range(6)]
    # one job: in this process
    assert run_jobs(_square_and_pid, [(3,)], jobs=2) == [(9, os.getpid())]


def test_a_failing_job_raises_its_own_error():
    with pytest.raises(ValueError, match=r"^negative: -1$"):
        run_jobs(_square_and_pid, [(1,), (-1,), (2,)], jobs=2)
    with pytest.raises(ValueError, match=r"^negative: -1$"):
        run_jobs(_square_and_pid, [(1,), (-1,), (2,)], jobs=1)


def test_the_jobs_count_is_checked():
    assert check_jobs(0) == usable_cores() and check_jobs(3) == 3
    with pytest.raises(ValueError, match=r"^jobs must be 0 \(every core\) or a positive integer, not -2$"):
        check_jobs(-2)
    with pytest.raises(TypeError, match=r"^jobs must be an integer, not 2\.0$"):
        check_jobs(2.0)


def test_a_size_sweep_on_two_workers_maps_as_one(tmp_path, capsys):
    argv = ["--network", "tiny", "--cluster", "ecp5-85:2", "--sizes", "1:4"]
    main([*argv, "--out", str(tmp_path / "one")])
    main([*argv, "--jobs", "2", "--out", str(tmp_path / "two")])
    captured = capsys.readouterr()
    assert captured.err.endswith("sweep: 4 of 4 sizes mapped\n")
    one, two = (json.loads((tmp_path / name / "scaling.json").read_text()) for name in ("one", "two"))
    assert one == two and [p["devices"] for p in one] == [1, 2, 3, 4]
