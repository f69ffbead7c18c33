#!/usr/bin/env python3
"""The controller's submission path alone, for several builds, with one client for all.

Usage: bench/submit-path.py N ROUNDS NAME=PATH/TO/tandem ...   (tandem-slurm beside each)

`tandem bench submit`'s API figure is the rate of each build's own client while the cluster
runs what it submits. This takes the client and the jobs out: for each build it first records
the body that build's `sbatch --parsable --hold -o /dev/null --wrap true` sends (through a Unix
socket this script answers; the environment then cut to PATH, as `bench submit`'s), then, for
each round and build in turn, starts `tandem server` with no agents, sends 200 submissions to
warm it, and N more from this one asyncio client, each on a fresh Unix connection, 32 at once
(HTTP/1.1, as the commands and `bench submit` send them; the jobs are held, so nothing is
scheduled). It prints the wall time and the controller's CPU per submission (utime + stime of
/proc/PID/stat across the N); the rate is bounded by this client, the CPU per submission is
the controller's own.
"""
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

if len(sys.argv) < 4:
    sys.exit(__doc__)
n, rounds = int(sys.argv[1]), int(sys.argv[2])
builds = [a.split("=", 1) for a in sys.argv[3:]]
tmp = tempfile.mkdtemp(prefix="tandem-submit-path-")


def capture(tandem):
    """The body this build's sbatch sends."""
    sock = os.path.join(tmp, "capture.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    s = socket.socket(socket.AF_UNIX)
    s.bind(sock)
    s.listen(1)
    got = {}

    def serve():
        c, _ = s.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += c.recv(65536)
        got["body"] = body
        r = b'{"job_ids":[1]}'
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(r), r))
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    link = os.path.join(tmp, "sbatch")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.join(os.path.dirname(os.path.abspath(tandem)), "tandem-slurm"), link)
    subprocess.run([link, "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
                   env={**os.environ, "TANDEM_SERVER": f"unix://{sock}"}, stdout=subprocess.DEVNULL, check=True)
    t.join()
    s.close()
    b = json.loads(got["body"])
    b["env"], b["cwd"], b["host"] = [["PATH", "/usr/bin:/bin"]], tmp, "bench"
    return json.dumps(b).encode()


async def drive(sock, body, count, conc):
    req = b"POST /v1/jobs HTTP/1.1\r\nhost: tandem\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    left = count

    async def worker():
        nonlocal left
        while left > 0:
            left -= 1
            r, w = await asyncio.open_unix_connection(sock)
            w.write(req)
            head = await r.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"refused: {head[:200]!r}")
            length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
            await r.readexactly(length)
            w.close()

    t = time.time()
    await asyncio.gather(*[worker() for _ in range(conc)])
    return time.time() - t


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


bodies = {name: capture(path) for name, path in builds}
for name, _ in builds:
    print(f"{name}: a submission's body is {len(bodies[name])} bytes")
for r in range(rounds):
    for name, path in builds:
        data = os.path.join(tmp, f"data-{name}")
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data)
        p = subprocess.Popen([path, "server", "--listen", "127.0.0.1:0", "--data", data],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sock = os.path.join(data, "tandem.sock")
        deadline = time.time() + 30
        while not (os.path.exists(sock) and os.path.exists(os.path.join(data, "addr"))):
            if time.time() > deadline:
                sys.exit(f"{name}: the controller did not start")
            time.sleep(0.05)
        asyncio.run(drive(sock, bodies[name], 200, 8))
        before = cpu(p.pid)
        wall = asyncio.run(drive(sock, bodies[name], n, 32))
        used = cpu(p.pid) - before
        p.terminate()
        p.wait()
        print(f"round {r + 1} {name}: {n} submissions in {wall:.3f} s ({n / wall:,.0f}/s), "
              f"controller {used * 1e6 / n:.1f} us CPU per submission")
shutil.rmtree(tmp, ignore_errors=True)
