#!/usr/bin/env python3
"""CPU used by each kind of Tandem process during `tandem bench submit` (BENCHMARKS.md 4.1).

Usage: bench/cpu-by-process.py PATH/TO/tandem [JOBS]

Starts `tandem bench submit --jobs JOBS --cli-jobs 100 --agents 4 --json` with that binary
(tandem-slurm beside it), reads /proc/PID/stat of every process whose command line starts with
that binary every 50 ms, keeps each one's last figures, and prints user and system CPU by the
process's subcommand (server, agent, __launcher), with the CPU of the children each waited for.
The sampling itself costs some CPU: compare builds measured with it, not with plain runs.
"""
import json
import os
import subprocess
import sys
import time

exe = sys.argv[1]
jobs = sys.argv[2] if len(sys.argv) > 2 else "3000"
p = subprocess.Popen([exe, "bench", "submit", "--jobs", jobs, "--cli-jobs", "100", "--agents", "4", "--json"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
tick = os.sysconf("SC_CLK_TCK")
last = {}


def role(pid):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return None
    if len(cmd) < 2 or cmd[0] != exe.encode():
        return None
    return cmd[1].decode(errors="replace")


while p.poll() is None:
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        r = role(d)
        if r is None or r == "bench":
            continue
        try:
            f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        last[d] = (r, *map(int, f[11:15]))
    time.sleep(0.05)
out = json.loads(p.stdout.read())
print({k: round(out[k], 1) for k in ("completed_jobs_per_s", "api_submissions_per_s", "cli_submissions_per_s")})
agg = {}
for r, ut, st, cut, cst in last.values():
    a = agg.setdefault(r, [0, 0, 0, 0, 0])
    a[0] += 1
    a[1] += ut
    a[2] += st
    a[3] += cut
    a[4] += cst
for r, a in sorted(agg.items()):
    print(f"  {r:12} processes={a[0]} user={a[1] / tick:.2f}s sys={a[2] / tick:.2f}s "
          f"children user={a[3] / tick:.2f}s sys={a[4] / tick:.2f}s")
