"""Independent jobs (one mapping per cluster size, one training run per seed and width) on
this machine's cores.

Built on the standard library's process pool (``concurrent.futures``): each job runs for
seconds to minutes and shares nothing with the others, so a pool of worker processes is
all they need, with nothing to install; Ray or Dask would add a scheduler for a fan-out a
pool does. A chain simulation cut across processes is another matter (sim/distributed.py,
MPI). The jobs' results come back in the order given, whatever order they finish in.
"""

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import redirect_stderr, redirect_stdout

from .errors import SpecError


def usable_cores():
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_jobs(jobs):
    """``jobs`` (a --jobs value) as a count of worker processes: 0 means every usable core."""
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"jobs must be an integer, not {jobs!r}")
    if jobs < 0:
        raise ValueError(f"jobs must be 0 (every core) or a positive integer, not {jobs!r}")
    return jobs or usable_cores()


def run_jobs(function, arguments, jobs=1, progress=None):
    """``function(*args)`` for every ``args`` of ``arguments``, on ``jobs`` worker processes
    (1: one after the other in this process); the results in the order of ``arguments``.
    ``progress(done, total, index, result)`` is called as each job finishes. The first job to raise
    stops the others (those not started are cancelled) and its exception is raised here.
    ``function`` and the arguments must pickle (a module-level function)."""
    arguments = [tuple(args) for args in arguments]
    workers = min(check_jobs(jobs), len(arguments))
    results = [None] * len(arguments)
    if workers <= 1:
        for index, args in enumerate(arguments):
            results[index] = function(*args)
            if progress is not None:
                progress(index + 1, len(arguments), index, results[index])
        return results
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(function, *args): index for index, args in enumerate(arguments)}
        try:
            for done, future in enumerate(as_completed(futures), 1):
                index = futures[future]
                results[index] = future.result()
                if progress is not None:
                    progress(done, len(arguments), index, results[index])
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return results


def run_logged(path, function, *args):
    """``function(*args)`` with what it prints written to the file ``path`` (a job's log); a
    refusal (:class:`~mapping.errors.SpecError`) is logged as ``error: ...`` and returned as its
    message, so it ends only this job."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as log, redirect_stdout(log), redirect_stderr(log):
        try:
            return function(*args)
        except SpecError as error:
            print(f"error: {error}")
            return str(error)
