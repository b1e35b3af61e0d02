#!/usr/bin/env python3
"""Where a run's slow requests are: percentiles, and the dips they sit in.

usage: test/perf/dips.py LATENCY_LOG [WINDOW_MS]

Reads a `holdfast bench --latency-log` file (client, start µs, latency µs per
line), splits the run into windows (100 ms by default) by each request's
start, and prints: the latency percentiles of all requests; the windows in
which the cluster answered fewer than 0.8 times the median window's count
(a dip: when it started, how many requests started in it, the slowest); and
the p99 of the requests outside the dips. Pure arithmetic over the file.
"""
import collections
import sys


def pct(sorted_vals, q):
    return sorted_vals[int(q * (len(sorted_vals) - 1))] / 1000 if sorted_vals else 0.0


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    window_us = int(float(sys.argv[2]) * 1000) if len(sys.argv) == 3 else 100_000
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            client, start, took = line.strip().split(",")
            rows.append((int(client), int(start), int(took)))
    if not rows:
        sys.exit("no requests in the log")
    count = collections.Counter(r[1] // window_us for r in rows)
    slowest = collections.defaultdict(int)
    for r in rows:
        w = r[1] // window_us
        slowest[w] = max(slowest[w], r[2])
    # The first and last windows are partly outside the run.
    inner = sorted(count)[1:-1] or sorted(count)
    median = sorted(count[w] for w in inner)[len(inner) // 2]
    dips = [w for w in inner if count[w] < 0.8 * median]
    lat = sorted(r[2] for r in rows)
    print(f"requests {len(rows)}: p50 {pct(lat, .5):.2f} ms, p90 {pct(lat, .9):.2f}, "
          f"p99 {pct(lat, .99):.2f}, p99.9 {pct(lat, .999):.2f}, max {lat[-1] / 1000:.1f}")
    print(f"windows of {window_us // 1000} ms: {len(inner)}, median {median} requests; "
          f"dips (below 0.8 of it): {len(dips)}")
    for w in dips:
        print(f"  {w * window_us / 1e6:7.1f} s  {count[w]:6d} requests  slowest {slowest[w] / 1000:.1f} ms")
    dipset = set(dips)
    rest = sorted(r[2] for r in rows if r[1] // window_us not in dipset)
    print(f"outside the dips: {len(rest)} requests, p99 {pct(rest, .99):.2f} ms")


if __name__ == "__main__":
    main()
