#!/usr/bin/env python3
"""Share of a holdfast node's CPU by part, from CPU profiles.

usage: test/perf/cpu-share.py [--ops N] BINARY PROFILE...

Each sample is counted under the first category whose pattern appears in
any frame of its stack, in the order below; JSON is reported separately,
over every frame. BINARY is the holdfast binary the profiles came from.
With --ops N (the operations served during each profile), every share is
also printed as CPU microseconds per operation.
"""
import collections
import re
import subprocess
import sys

CATEGORIES = [
    ("fsync", "syscall.Fdatasync"),
    ("GC", "runtime.gcBgMarkWorker"),
    ("log store, bolt (fsync excluded)", "BoltStore"),
    ("log store, raftlog (fsync excluded)", "raftlog."),
    ("state machine apply", "raft.(*Raft).runFSM"),
    ("Raft replication and transport", "github.com/hashicorp/raft."),
    ("peer link (forwarded operations)", "peerlink"),
    ("HTTP server (net/http, gin, handlers, JSON)", "net/http.(*conn).serve"),
    ("HTTP front (the API's common requests, handlers, JSON)", "server.(*frontConn).serve"),
    ("HTTP client (REST forwarding)", "net/http.(*persistConn)"),
    ("scheduler and other runtime", "runtime."),
]
JSON = ("encoding/json", "go-json-experiment", "jsoncanon", "server.encodeJSON",
        "server.appendJob", "server.jobReply")


def stacks(binary, path):
    out = subprocess.run(["go", "tool", "pprof", "-traces", binary, path],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split("-----------+-------------------------------------------------------"):
        lines = [l.strip() for l in block.strip().split("\n") if l.strip()]
        if not lines:
            continue
        m = re.match(r"([\d.]+)(ms|s)\s+(.*)", lines[0])
        if m:
            ms = float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
            yield ms, [m.group(3)] + lines[1:]


def main():
    args = sys.argv[1:]
    ops = 0.0
    if args[:1] == ["--ops"]:
        ops, args = float(args[1]), args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    binary = args[0]
    for path in args[1:]:
        total, json_ms, share = 0.0, 0.0, collections.Counter()
        for ms, frames in stacks(binary, path):
            total += ms
            name = next((n for n, pat in CATEGORIES if any(pat in f for f in frames)), "other")
            share[name] += ms
            if any(j in f for f in frames for j in JSON):
                json_ms += ms
        if total == 0:
            print(f"{path}: no samples")
            continue
        print(f"{path}: {total / 1000:.1f} s of samples")
        def row(name, ms):
            per_op = f"  {1000 * ms / ops:7.1f} us/op" if ops else ""
            print(f"  {name:46s} {100 * ms / total:5.1f}%{per_op}")
        for name in [n for n, _ in CATEGORIES] + ["other"]:
            row(name, share[name])
        row("JSON (any frame)", json_ms)
        row("total", total)


if __name__ == "__main__":
    main()
