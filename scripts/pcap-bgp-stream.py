#!/usr/bin/env python3
"""Reassembles the BGP byte stream from SRC to DST (port 179 on either side)
in a lab capture and reports what it carried: holes, retransmitted bytes that
differ from the first copy, message counts, NLRI and withdrawn prefixes
(IPv4 unicast in the UPDATE body; MP_REACH is not decoded).

  scripts/pcap-bgp-stream.py FILE.pcap SRC DST [--nlri OUT.txt]

Used to tell "the peer never got the route" from "the peer got it and did
not take it in" after a failed NSR lab run (docs/notes/issue12-nsr-performance.md).
Standard library only; reads classic pcap (tcpdump -w) with Ethernet frames.
"""
import argparse
import collections
import ipaddress
import struct
import sys


def segments(path, src, dst):
    with open(path, "rb") as f:
        if len(f.read(24)) < 24:
            return
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            _, _, incl, _ = struct.unpack("<IIII", h)
            d = f.read(incl)
            off = 14
            et = struct.unpack(">H", d[12:14])[0]
            if et == 0x8100:
                et, off = struct.unpack(">H", d[16:18])[0], 18
            if et != 0x0800:
                continue
            ip = d[off:]
            if ip[9] != 6:
                continue
            if str(ipaddress.IPv4Address(ip[12:16])) != src:
                continue
            if str(ipaddress.IPv4Address(ip[16:20])) != dst:
                continue
            ihl = (ip[0] & 15) * 4
            tot = struct.unpack(">H", ip[2:4])[0]
            tcp = ip[ihl:tot]
            sp, dp, seq = struct.unpack(">HHI", tcp[:8])
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload and 179 in (sp, dp):
                yield (sp, dp), seq, payload


def prefixes(blob, out):
    i = 0
    while i < len(blob):
        plen = blob[i]
        nb = (plen + 7) // 8
        raw = bytes(blob[i + 1:i + 1 + nb]) + b"\0" * (4 - nb)
        out.add(f"{ipaddress.IPv4Address(raw)}/{plen}")
        i += 1 + nb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--nlri", help="write the announced prefixes here, one a line")
    a = ap.parse_args()
    conns = collections.defaultdict(list)
    for conn, seq, payload in segments(a.pcap, a.src, a.dst):
        conns[conn].append((seq, payload))
    if not conns:
        sys.exit("no BGP payload from %s to %s" % (a.src, a.dst))
    for conn, segs in conns.items():
        base = segs[0][0]
        buf, differing = {}, 0
        for seq, payload in segs:
            rel = (seq - base) % (1 << 32)
            for i, b in enumerate(payload):
                old = buf.setdefault(rel + i, b)
                differing += old != b
        end = max(buf) + 1
        missing = end - len(buf)
        data = bytes(buf.get(i, 0) for i in range(end))
        msgs, nlri, withdrawn = collections.Counter(), set(), set()
        pos = 0
        while pos + 19 <= end:
            length, kind = struct.unpack(">HB", data[pos + 16:pos + 19])
            if data[pos:pos + 16] != b"\xff" * 16 or length < 19:
                nxt = data.find(b"\xff" * 16, pos + 1)
                if nxt < 0:
                    break
                pos = nxt
                continue
            msgs[kind] += 1
            if kind == 2:
                body = data[pos + 19:pos + length]
                wl = struct.unpack(">H", body[:2])[0]
                al = struct.unpack(">H", body[2 + wl:4 + wl])[0]
                prefixes(body[2:2 + wl], withdrawn)
                prefixes(body[4 + wl + al:], nlri)
            pos += length
        names = {1: "OPEN", 2: "UPDATE", 3: "NOTIFICATION", 4: "KEEPALIVE", 5: "ROUTE-REFRESH"}
        print(f"{a.src}:{conn[0]} -> {a.dst}:{conn[1]}: {end} bytes, {missing} missing, "
              f"{differing} retransmitted bytes differing from the first copy")
        print("  messages: " + ", ".join(f"{names.get(k, k)} {n}" for k, n in sorted(msgs.items())))
        print(f"  NLRI {len(nlri)}, withdrawn {len(withdrawn)}")
        if a.nlri:
            with open(a.nlri, "w") as f:
                f.writelines(p + "\n" for p in sorted(nlri))


if __name__ == "__main__":
    main()
