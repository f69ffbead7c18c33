#!/usr/bin/env python3
"""CPU of one `sbatch` process per submission, for several sbatch binaries side by side.

Usage: TANDEM_SERVER=unix://DATA/controller/tandem.sock bench/sbatch-cpu.py N NAME=PATH/TO/sbatch ...

Runs `sbatch --parsable -o /dev/null --hold --wrap true` N times with each binary (a link
named sbatch to a tandem-slurm), three rounds alternated, and prints the CPU each submission
took (user + system of the children, from getrusage over the loop) and the submissions per
second. The jobs are held: nothing runs, so only the command and the controller's answer count.
"""
import resource
import subprocess
import sys
import time

if len(sys.argv) < 3:
    sys.exit(__doc__)
n = int(sys.argv[1])
bins = [a.split("=", 1) for a in sys.argv[2:]]
for _ in range(3):
    for name, b in bins:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        for _ in range(n):
            subprocess.run([b, "--parsable", "-o", "/dev/null", "--hold", "--wrap", "true"], stdout=subprocess.DEVNULL, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t1 = time.time()
        cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / n * 1000
        print(f"{name} cpu {cpu:.2f} ms/submission, {n / (t1 - t0):.0f}/s")
