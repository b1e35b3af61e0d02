#!/usr/bin/env python3
"""Per-operation system counters of every server in a ../shared/bench/compare run.

usage:
  test/perf/procwatch.py watch SAMPLES.jsonl
      Once a second, until no server is left, appends one line to
      SAMPLES.jsonl with the counters of every `nats-server` and
      `holdfast serve` process: read and write system calls (/proc/PID/io),
      CPU ticks and minor page faults (/proc/PID/stat) and thread switches,
      voluntary and not, summed over its threads (/proc/PID/task/*/status).
      Start it once compare has started its servers.
  test/perf/procwatch.py counters PID...
      Prints one line per process of what it has used so far: CPU seconds
      (user + system), minor page faults, read and write system calls and
      thread switches (test/perf/profile.sh reads these).
  test/perf/procwatch.py report SAMPLES.jsonl RESULTS.jsonl [CONC]
      For every run of compare's RESULTS.jsonl at CONC clients (64), prints
      each server's counters per operation over the run's measured window
      (the samples nearest its 15 s after the 2 s warm-up).
  test/perf/procwatch.py idle RESULTS.jsonl
      Needs no samples: for every run of compare's RESULTS.jsonl, prints the
      CPU milliseconds per second each server of the *other* system used
      during that run's window, while its own system had no load (compare
      records every server's CPU in every window).

The counters are the kernel's, for the whole process, so a server's idle
work and its peers' traffic are in them as they are in compare's CPU
figures.
"""
import json
import os
import sys
import time

FIELDS = ('reads', 'writes', 'cpu_us', 'faults', 'switches')


def servers():
    """Yields (pid, name) of the running servers."""
    for p in os.listdir('/proc'):
        if not p.isdigit():
            continue
        try:
            cmd = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\0')
        except OSError:
            continue
        exe = os.path.basename(cmd[0].decode(errors='replace'))
        if exe.startswith('nats-server'):
            yield int(p), 'nats'
        elif exe == 'holdfast' and len(cmd) > 1 and cmd[1] == b'serve':
            yield int(p), 'holdfast'


def counters(pid, tick):
    io = dict(line.split(': ') for line in open(f'/proc/{pid}/io').read().splitlines() if line)
    st = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    switches = 0
    for task in os.listdir(f'/proc/{pid}/task'):
        try:
            for line in open(f'/proc/{pid}/task/{task}/status'):
                if line.startswith(('voluntary_ctxt_switches', 'nonvoluntary_ctxt_switches')):
                    switches += int(line.split()[1])
        except OSError:
            pass  # the thread ended
    # stat fields 10 (minflt), 14 (utime) and 15 (stime), counted from the state (field 3).
    return [int(io['syscr']), int(io['syscw']), (int(st[11]) + int(st[12])) * 1_000_000 // tick, int(st[7]), switches]


def watch(path):
    tick = os.sysconf('SC_CLK_TCK')
    found, found_at = [], 0.0
    with open(path, 'a') as out:
        while True:
            now = time.time()
            if now - found_at > 10:
                # Listing /proc costs more than the counters: every 10 s.
                found, found_at = list(servers()), now
            rec = {'t': now, 'procs': {}}
            for pid, kind in found:
                try:
                    rec['procs'][str(pid)] = {'kind': kind, 'c': counters(pid, tick)}
                except OSError:
                    pass  # the process ended
            if not found:
                return
            if rec['procs']:
                out.write(json.dumps(rec) + '\n')
                out.flush()
            time.sleep(1)


def report(samples_path, results_path, conc):
    samples = [json.loads(line) for line in open(samples_path)]

    def at(t):
        return min(samples, key=lambda s: abs(s['t'] - t))

    print('round system workload ops/s | per operation, each server: reads writes cpu_us faults switches')
    for line in open(results_path):
        r = json.loads(line)
        if r.get('type') != 'run' or r['conc'] != conc:
            continue
        res = r['result']
        rate = res['ops'] / res['seconds']
        a, b = at(r['start_unix'] + 2), at(r['start_unix'] + 2 + res['seconds'])
        ops = rate * (b['t'] - a['t'])
        if ops <= 0:
            continue
        cols = []
        for pid, pa in sorted(a['procs'].items()):
            pb = b['procs'].get(pid)
            if pb is None or pa['kind'] != r['system']:
                continue
            d = [(y - x) / ops for x, y in zip(pa['c'], pb['c'])]
            cols.append(f'pid {pid}: ' + ' '.join(f'{v:.2f}' if i != 2 else f'{v:.0f}' for i, v in enumerate(d)))
        print(r['round'], r['system'], r['workload'], f'{rate:.0f}', '| ' + ' | '.join(cols))


def idle(results_path):
    prefix = {'holdfast': 'hf', 'nats': 'nats', 'etcd': 'etcd'}
    print('round workload conc loaded | idle servers of the other system, CPU ms/s')
    for line in open(results_path):
        r = json.loads(line)
        if r.get('type') != 'run' or not r.get('window_s'):
            continue
        own = prefix.get(r['system'], r['system'])
        cols = [f'{name} {1000 * cpu / r["window_s"]:.1f}'
                for name, cpu in sorted(r['cpu_s_window'].items()) if not name.startswith(own)]
        print(r['round'], r['workload'], r['conc'], r['system'], '| ' + ' '.join(cols))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == 'watch':
        watch(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == 'counters':
        tick = os.sysconf('SC_CLK_TCK')
        for pid in sys.argv[2:]:
            reads, writes, cpu_us, faults, switches = counters(int(pid), tick)
            print(cpu_us / 1e6, faults, reads, writes, switches)
    elif len(sys.argv) in (4, 5) and sys.argv[1] == 'report':
        report(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else 64)
    elif len(sys.argv) == 3 and sys.argv[1] == 'idle':
        idle(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main()
