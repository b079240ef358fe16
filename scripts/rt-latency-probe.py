#!/usr/bin/env python3
"""How late a real-time thread wakes on this machine: a diagnostic for
timing-test failures (BFD at 100 ms x 3 leaves 300 ms).

    scripts/rt-latency-probe.py SECONDS [--threshold-ms 20] [--cpu-ticks]

Runs one SCHED_FIFO priority-10 thread that sleeps 10 ms at a time for
SECONDS (bounded), and prints a line for each wakeup more than the
threshold late, then the count and the worst. With --cpu-ticks, each line
also shows the system, irq, softirq and steal ticks each CPU accrued across
that sleep (/proc/stat). Run it beside `make test` or a few lab tests; the
thread that delays it can be found with
`perf record -a -g -e cpu-clock -e sched:sched_waking --filter 'pid == PID'`
(docs/notes/issue26-commands.md: the lab's 64 MiB tcpdump rings held a CPU
for ~300 ms each on this PREEMPT_NONE kernel). Needs root (or
CAP_SYS_NICE) and a cgroup with a real-time budget.
"""
import argparse
import os
import time


def cpu_ticks():
    out = []
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            if line[3] != " ":
                v = list(map(int, line.split()[1:]))
                out.append((v[2], v[5], v[6], v[7]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seconds", type=float)
    ap.add_argument("--threshold-ms", type=float, default=20.0)
    ap.add_argument("--cpu-ticks", action="store_true")
    args = ap.parse_args()
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    end = time.monotonic() + args.seconds
    worst, late_count, n = 0.0, 0, 0
    while time.monotonic() < end:
        before = cpu_ticks() if args.cpu_ticks else None
        t0 = time.monotonic()
        time.sleep(0.01)
        late = (time.monotonic() - t0 - 0.01) * 1e3
        n += 1
        worst = max(worst, late)
        if late > args.threshold_ms:
            late_count += 1
            extra = ""
            if before is not None:
                d = [tuple(b - a for a, b in zip(p, q)) for p, q in zip(before, cpu_ticks())]
                extra = f"; per CPU (system, irq, softirq, steal) ticks: {d}"
            print(f"{time.strftime('%H:%M:%S')} late {late:.1f} ms{extra}", flush=True)
    print(f"done: {n} wakeups, {late_count} more than {args.threshold_ms:g} ms late, worst {worst:.1f} ms",
          flush=True)


if __name__ == "__main__":
    main()
