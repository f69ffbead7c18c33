#!/usr/bin/env python3
"""Where the CPU goes while `tandem bench submit` submits through the API, for several builds.

Usage: bench/api-window.py ROUNDS [--whole] NAME=PATH/TO/tandem ...   (as root; needs perf)

For each round and build in turn: `perf record -a -F 999` of the whole machine around one
`tandem bench submit --jobs 3000 --cli-jobs 100 --agents 4 --json`. The bench client's samples
come in dense runs while it submits (gaps of 0.1 s or more end a run): the first run of more
than 50 samples is the API phase (3,000 jobs that run meanwhile), the last is the held phase
(3,000 held jobs, then five listings). For each it prints the window and the CPU-seconds
(samples / 999) by kind: the controller, the bench client, agents (`tandem`), keepers
(`tandem-keeper`), the jobs (`job_*` scripts and what they run), the rest, and idle. With
`--whole`, the same for the whole run instead (its first column then completed jobs/s).
"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

if len(sys.argv) < 3:
    sys.exit(__doc__)
rounds = int(sys.argv[1])
whole = "--whole" in sys.argv[2:]
builds = [a.split("=", 1) for a in sys.argv[2:] if a != "--whole"]
tmp = tempfile.mkdtemp(prefix="tandem-api-window-")
kinds = ("controller", "client", "agents", "keepers", "jobs", "other", "idle")
print("| build, round | API/s | window s | " + " | ".join(kinds) + " |")
print("|---" * (3 + len(kinds)) + "|")
for r in range(rounds):
    for name, path in builds:
        data = os.path.join(tmp, "perf.data")
        perf = subprocess.Popen(["perf", "record", "-a", "-F", "999", "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        b = subprocess.Popen([path, "bench", "submit", "--jobs", "3000", "--cli-jobs", "100", "--agents", "4", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ctl = None
        while ctl is None and b.poll() is None:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if f"tandem-bench-{b.pid}/ctl".encode() in cmd and b" server " in cmd.replace(b"\0", b" "):
                    ctl = int(pid)
            time.sleep(0.05)
        report = json.loads(b.communicate()[0])
        perf.send_signal(2)
        perf.wait()
        out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,time"], capture_output=True, text=True).stdout
        rows = []
        for line in out.splitlines():
            p = line.split()
            rows.append((float(p[-1].rstrip(":")), int(p[-2].split("/")[0]), " ".join(p[:-2])))
        mine = sorted(t for t, pid, _ in rows if pid == b.pid)
        runs = [[mine[0]]]
        for t in mine[1:]:
            if t - runs[-1][-1] > 0.1:
                runs.append([t])
            else:
                runs[-1].append(t)
        big = [x for x in runs if len(x) > 50]
        phases = (("whole", [rows[0][0], rows[-1][0]]),) if whole else (("API", big[0]), ("held", big[-1]))
        for phase, run in phases:
            a, z = run[0], run[-1]
            c = collections.Counter()
            for t, pid, comm in rows:
                if a <= t <= z:
                    k = ("controller" if pid == ctl else "client" if pid == b.pid else "idle" if pid == 0
                         else "keepers" if comm.startswith("tandem-keeper") else "agents" if comm.startswith("tandem")
                         else "jobs" if comm.startswith("job_") or comm in ("sh", "bash", "true", "sleep")
                         else "other")
                    c[k] += 1
            rate = {"API": f"{report['api_submissions_per_s']:,.0f}", "held": "(held)"}.get(phase, f"{report['completed_jobs_per_s']:,.1f} completed/s")
            print(f"| {name} {r + 1} {phase} | {rate} | {z - a:.3f} | " + " | ".join(f"{c[k] / 999:.2f}" for k in kinds) + " |")
        os.unlink(data)
os.rmdir(tmp)
