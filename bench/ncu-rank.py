#!/usr/bin/env python3
"""ncu-rank.py: rank the kernels of profiled decode steps by time.

Reads a kernel trace of one graph-replayed step, the kernels timed as they ran: bench/
decode-e2e --trace's files, or Nsight Systems' (`nsys stats --report cuda_gpu_trace --format
csv` of `nsys profile --cuda-graph-trace=node --capture-range=cudaProfilerApi
--capture-range-end=stop bench/decode-e2e --batches B --modes M --profile`), and prints one
table: kernel, launches, time, the step's span it accounts for, its share, mean time per
launch, the last grid x block; the step's span (first start to last end) and the time no
kernel ran head it. Kernels overlap (programmatic dependent launch starts one while the one
before runs, and it waits inside; a side stream's kernels run beside the step's), so a
kernel's time is not what it adds to the step: each instant of the span goes to the kernel
running then that ends first (the one the others wait for; a CUDA graph's kernels come with
its own streams, not the capture's, so the stream cannot tell the step's from a side one).

Or `ncu --import REP --csv --page raw --print-units base` exports of
`ncu --profile-from-start off --section SpeedOfLight --section LaunchStats
bench/decode-e2e --batches B --profile` (one graph-replayed decode step per mode, fast
first, then deterministic) and prints one markdown table per step: kernel, launches,
time, share of the step, time-weighted SM and memory throughput (% of peak), the last
launch's grid x block, and the DRAM bytes read and written when the export has
`--metrics dram__bytes_read.sum,dram__bytes_write.sum`. A step starts at the forward's
embedding kernel.

usage: ncu-rank.py EXPORT.csv...   (nsys traces and ncu exports alike)
"""
import collections
import csv
import heapq
import re
import sys

TOP = 24


def num(v):
    try:
        return float(v.replace(',', ''))
    except ValueError:
        return 0.0


def rows_of(path, first_col):
    """The CSV rows of path from its header line on (a tool may print other lines first)."""
    with open(path, newline='') as fh:
        lines = fh.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"%s"' % first_col) or
                  l.startswith(first_col + ',')), None)
    return list(csv.DictReader(lines[start:])) if start is not None else []


def short_name(name):
    """A kernel's name without its parameters: a mangled one (CUPTI's) as its identifier and
    its integer template arguments, dsv4_wg_kernel<64,2,1,0,1>."""
    name = name.split('(')[0].replace('void ', '')
    m = re.match(r'_ZL?(\d+)', name)  # L: internal linkage (a static kernel)
    if m:
        end = m.end() + int(m.group(1))
        args = re.findall(r'L[a-z](\d+)E', name[end:]) if name[end:end + 1] == 'I' else []
        name = name[m.end():end] + ('<%s>' % ','.join(args) if args else '')
    return name[:60]


def span_owners(rows):
    """(kernel, time) for each stretch of the trace's span, owned by the kernel running
    through it that ends first (none: no kernel ran)."""
    ks = sorted((num(r['Start (ns)']), num(r['Start (ns)']) + num(r['Duration (ns)']),
                 short_name(r['Name'])) for r in rows)
    edges = sorted({t for s, e, _ in ks for t in (s, e)})
    running, j = [], 0  # a heap of (end, name)
    for a, b in zip(edges, edges[1:]):
        while j < len(ks) and ks[j][0] <= a:
            heapq.heappush(running, (ks[j][1], ks[j][2]))
            j += 1
        while running and running[0][0] <= a:
            heapq.heappop(running)
        if running:
            yield running[0][1], b - a


def nsys_table(path):
    rows = [r for r in rows_of(path, 'Start (ns)') if r.get('Name') and r.get('GrdX', '').strip()]
    if not rows:
        return False
    k = collections.OrderedDict()
    t0 = min(num(r['Start (ns)']) for r in rows)
    t1 = max(num(r['Start (ns)']) + num(r['Duration (ns)']) for r in rows)
    for r in rows:
        e = k.setdefault(short_name(r['Name']), {'n': 0, 't': 0.0, 'span': 0.0, 'grid': ''})
        e['n'] += 1
        e['t'] += num(r['Duration (ns)'])
        e['grid'] = '%s x %s' % (r['GrdX'] if r.get('GrdY', '1') in ('1', '') else
                                 '%s,%s' % (r['GrdX'], r['GrdY']), r['BlkX'])
    for name, t in span_owners(rows):
        k[name]['span'] += t
    total = sum(e['t'] for e in k.values())
    busy = sum(e['span'] for e in k.values())
    print('\n### %s: %d kernels, %.1f us of kernel time, step span %.1f us (%.1f us with no '
          'kernel running)\n' % (path, sum(e['n'] for e in k.values()), total / 1e3,
                                 (t1 - t0) / 1e3, (t1 - t0 - busy) / 1e3))
    print('| kernel | launches | us | span us | span share | us per launch | last grid x block |')
    print('|---|---:|---:|---:|---:|---:|---|')
    for name, e in sorted(k.items(), key=lambda kv: -kv[1]['span'])[:TOP]:
        print('| %s | %d | %.1f | %.1f | %.1f%% | %.1f | %s |' %
              (name, e['n'], e['t'] / 1e3, e['span'] / 1e3, 100 * e['span'] / (t1 - t0),
               e['t'] / e['n'] / 1e3, e['grid']))
    return True


def steps_of(path):
    rows = [r for r in rows_of(path, 'ID') if r.get('ID', '').strip().isdigit()]
    steps = []
    for r in rows:
        name = r['Kernel Name']
        if 'embed' in name or not steps:
            steps.append(collections.OrderedDict())
        short = name.split('(')[0].replace('void ', '')[:60]
        e = steps[-1].setdefault(short, {'n': 0, 't': 0.0, 'sm': 0.0, 'mem': 0.0, 'rd': 0.0,
                                         'wr': 0.0, 'grid': ''})
        t = num(r.get('gpu__time_duration.sum', '0'))
        e['n'] += 1
        e['t'] += t
        e['sm'] += t * num(r.get('sm__throughput.avg.pct_of_peak_sustained_elapsed', '0'))
        e['mem'] += t * num(
            r.get('gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed', '0'))
        e['rd'] += num(r.get('dram__bytes_read.sum', '0'))
        e['wr'] += num(r.get('dram__bytes_write.sum', '0'))
        e['grid'] = '%s x %s' % (r.get('launch__grid_size', '?'), r.get('launch__block_size', '?'))
    return steps


def main(paths):
    for path in paths:
        if nsys_table(path):
            continue
        steps = steps_of(path)
        for i, st in enumerate(steps):
            total = sum(e['t'] for e in st.values())
            mode = ('fast', 'deterministic')[i] if i < 2 else 'step %d' % i
            print('\n### %s, %s: %d kernels, %.1f us of kernel time\n' %
                  (path, mode, sum(e['n'] for e in st.values()), total / 1e3))
            print('| kernel | launches | us | share | SM % | mem % | MB read | MB written | '
                  'GB/s | last grid x block |')
            print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---|')
            for name, e in sorted(st.items(), key=lambda kv: -kv[1]['t'])[:TOP]:
                w = max(e['t'], 1.0)
                print('| %s | %d | %.1f | %.0f%% | %.0f | %.0f | %.2f | %.2f | %.0f | %s |' %
                      (name, e['n'], e['t'] / 1e3, 100 * e['t'] / total, e['sm'] / w,
                       e['mem'] / w, e['rd'] / 1e6, e['wr'] / 1e6, (e['rd'] + e['wr']) / w,
                       e['grid']))


if __name__ == '__main__':
    main(sys.argv[1:])
