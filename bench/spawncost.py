#!/usr/bin/env python3
"""Median CPU (user + system of the child, from wait4) and wall time of whole commands.

    bench/spawncost.py [--runs N] 'CMD ARGS...' ['CMD2 ARGS...' ...]

Each quoted argument is one command line (split on spaces, run without a shell, output to
/dev/null); each runs 5 times unmeasured, then N times (default 200). For comparing binaries
(BENCHMARKS.md section 9); bench/startup.sh measures the Slurm commands against a cluster it
starts itself.
"""
import os
import statistics
import sys
import time


def one(argv):
    fd = os.open("/dev/null", os.O_WRONLY)
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1), (os.POSIX_SPAWN_DUP2, fd, 2)])
    _, _, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    os.close(fd)
    return ru.ru_utime + ru.ru_stime, wall


def main():
    args = sys.argv[1:]
    runs = 200
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    if not args or runs < 1:
        sys.exit(__doc__)
    for line in args:
        argv = line.split()
        for _ in range(5):
            one(argv)
        r = [one(argv) for _ in range(runs)]
        cpu = statistics.median(x[0] for x in r) * 1000
        wall = statistics.median(x[1] for x in r) * 1000
        print(f"{line:60s} cpu {cpu:.3f} ms  wall {wall:.3f} ms")


main()
