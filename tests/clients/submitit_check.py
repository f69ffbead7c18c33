"""submitit against a Tandem cluster, as a researcher uses it (crates/tandem/tests/clients.rs).

    python submitit_check.py FOLDER PARTITION

Each check prints a line starting with "ok"; any failure raises, and the exit status is not 0.
"""
import os
import sys
import time

import submitit


def add(a, b):
    return a + b


def boom():
    raise ValueError("boom from the task")


def die(_):
    os._exit(3)


def nap():
    time.sleep(300)


def main():
    folder, partition = sys.argv[1], sys.argv[2]
    ex = submitit.AutoExecutor(folder=folder)
    assert ex.cluster == "slurm", ex.cluster
    ex.update_parameters(slurm_partition=partition, timeout_min=10, cpus_per_task=1)

    job = ex.submit(add, 2, 3)
    assert job.result() == 5, job.result()
    print("ok submit", job.job_id, job.state, flush=True)

    jobs = ex.map_array(add, [1, 2, 3, 4], [10, 20, 30, 40])
    assert [j.result() for j in jobs] == [11, 22, 33, 44]
    print("ok map_array", [j.job_id for j in jobs], flush=True)

    job = ex.submit(boom)
    try:
        job.result()
        raise AssertionError("the function's exception did not come back")
    except submitit.core.utils.FailedJobError as e:
        assert "boom from the task" in str(e), str(e)
    print("ok exception", job.job_id, flush=True)

    jobs = ex.map_array(die, [1, 2])
    for j in jobs:
        try:
            j.result()
            raise AssertionError("a task that died without a result gave one")
        except submitit.core.utils.UncompletedJobError as e:
            assert "FAILED" in str(e) or "has not produced any output" in str(e), str(e)
    print("ok died", [(j.job_id, j.state) for j in jobs], flush=True)

    job = ex.submit(nap)
    deadline = time.time() + 60
    while job.state != "RUNNING":
        assert time.time() < deadline, f"never RUNNING: {job.state}"
        time.sleep(0.5)
    job.cancel()
    deadline = time.time() + 60
    while not job.state.startswith("CANCELLED"):
        assert time.time() < deadline, f"not cancelled: {job.state}"
        time.sleep(0.5)
        job.watcher.update()
    print("ok cancel", job.job_id, job.state, flush=True)


if __name__ == "__main__":
    main()
