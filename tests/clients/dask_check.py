"""dask-jobqueue against a Tandem cluster (crates/tandem/tests/clients.rs).

    python dask_check.py LOG_DIRECTORY PARTITION

SLURMCluster with a log directory, scale(2), a computation, close(). Prints lines starting
with "ok"; any failure raises.
"""
import os
import sys
import time

from dask.distributed import Client
from dask_jobqueue import SLURMCluster


def main():
    logs, partition = sys.argv[1], sys.argv[2]
    cluster = SLURMCluster(cores=1, memory="1GB", walltime="00:10:00", queue=partition, log_directory=logs, processes=1)
    print(cluster.job_script(), flush=True)
    cluster.scale(2)
    client = Client(cluster)
    client.wait_for_workers(2, timeout=120)
    print("ok scale", len(client.scheduler_info()["workers"]), flush=True)
    assert client.submit(lambda x: x + 1, 41).result(timeout=60) == 42
    total = client.submit(sum, client.map(lambda x: x * x, range(10))).result(timeout=60)
    assert total == 285, total
    print("ok compute", total, flush=True)
    client.close()
    cluster.close()
    # One error file per worker (the %J in `-e dask-worker-%J.err` expanded).
    deadline = time.time() + 30
    while True:
        errs = sorted(f for f in os.listdir(logs) if f.endswith(".err"))
        if len(errs) == 2 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert len(errs) == 2 and "%J" not in "".join(errs), errs
    print("ok close", errs, flush=True)


if __name__ == "__main__":
    main()
