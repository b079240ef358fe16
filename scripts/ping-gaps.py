#!/usr/bin/env python3
"""Listens as an sd_notify supervisor on a datagram socket and reports, per
sending pid, the longest gap between two of its messages (kernel receive
times, SO_TIMESTAMPNS) after its READY=1: how late holdfastd's watchdog
pings get under load (docs/notes/issue25-hang.md).

  [PING_GAPS_OUT=FILE] scripts/ping-gaps.py SOCKET SECONDS
  (FILE: the same summary, rewritten every 2 s)
  NOTIFY_SOCKET=SOCKET WATCHDOG_USEC=500000 <command that starts holdfastd>
"""
import json, os, socket, struct, sys, time

SO_TIMESTAMPNS = 35
SO_PASSCRED = 16
SCM_CREDENTIALS = 2

path, seconds = sys.argv[1], float(sys.argv[2])
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
os.chmod(path, 0o777)
s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
s.setsockopt(socket.SOL_SOCKET, SO_PASSCRED, 1)
s.settimeout(0.5)
per = {}
end = time.time() + seconds
out = os.environ.get("PING_GAPS_OUT")
last_dump = 0.0


def summary():
    return json.dumps([
        {"pid": pid, "pings": p["pings"], "ready": p["ready"], "max_gap_ms": round(p["max_gap_ms"], 1)}
        for pid, p in per.items()
    ])


while time.time() < end:
    if out and time.time() - last_dump > 2:
        last_dump = time.time()
        with open(out + ".tmp", "w") as f:
            f.write(summary() + "\n")
        os.replace(out + ".tmp", out)
    try:
        data, anc, _, _ = s.recvmsg(4096, 256)
    except socket.timeout:
        continue
    ts, pid = None, None
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", blob[:16])
            ts = sec + nsec / 1e9
        elif level == socket.SOL_SOCKET and kind == SCM_CREDENTIALS:
            pid = struct.unpack("iII", blob[:12])[0]
    p = per.setdefault(pid, {"pings": 0, "ready": False, "last": None, "max_gap_ms": 0.0})
    text = data.decode(errors="replace")
    if "READY=1" in text or "WATCHDOG=1" in text:
        p["ready"] = True
    if p["ready"] and p["last"] is not None:
        p["max_gap_ms"] = max(p["max_gap_ms"], (ts - p["last"]) * 1000)
    if p["ready"]:
        p["last"] = ts
    p["pings"] += "WATCHDOG=1" in text
print(summary())
