#!/usr/bin/env python3
"""Samples the state of the embedded store's writer thread of a running `steward serve`:
R (on a core or runnable), D (uninterruptible: in fdatasync/pwrite on the disk), S (asleep:
waiting for work or a lock). Usage: bench/writer-sample.py SECONDS (while a bench runs)"""
import os, sys, time, glob, collections
def find():
    for d in glob.glob('/proc/[0-9]*'):
        try:
            cmd = open(d + '/cmdline', 'rb').read().split(b'\0')
        except OSError:
            continue
        if len(cmd) > 1 and cmd[0].endswith(b'steward') and cmd[1] == b'serve':
            for t in glob.glob(d + '/task/*'):
                try:
                    if open(t + '/comm').read().startswith('steward-sqlite'):
                        return t
                except OSError:
                    pass
    return None
secs = float(sys.argv[1])
deadline = time.time() + 60
task = None
while task is None and time.time() < deadline:
    task = find(); time.sleep(0.05)
if task is None:
    sys.exit("no writer thread found")
counts = collections.Counter()
end = time.time() + secs
def cpu():
    f = open(task + '/schedstat').read().split()
    return int(f[0]), int(f[1])
c0 = cpu(); t0 = time.time()
while time.time() < end:
    try:
        st = open(task + '/stat').read()
    except OSError:
        break
    counts[st[st.rindex(')') + 2]] += 1
    time.sleep(0.001)
c1 = cpu(); t1 = time.time()
n = sum(counts.values())
print(f"samples {n}: " + ", ".join(f"{k} {100*v/n:.0f}%" for k, v in sorted(counts.items())))
print(f"writer on-CPU {100*(c1[0]-c0[0])/1e9/(t1-t0):.0f}% of wall time, run-queue wait {100*(c1[1]-c0[1])/1e9/(t1-t0):.0f}%")
