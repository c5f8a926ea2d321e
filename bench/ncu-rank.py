#!/usr/bin/env python3
"""ncu-rank.py: rank the kernels of profiled decode steps by time.

Reads an Nsight Systems kernel trace (`nsys stats --report cuda_gpu_trace --format csv` of
`nsys profile --cuda-graph-trace=node --capture-range=cudaProfilerApi
--capture-range-end=stop bench/decode-e2e --batches B --modes M --profile`: one
graph-replayed step, the kernels timed as they ran) and prints one table: kernel,
launches, time, share of the kernel time, mean time per launch, the last grid x block;
the step's span (first start to last end) heads it.

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


def nsys_table(path):
    rows = [r for r in rows_of(path, 'Start (ns)') if r.get('Name') and r.get('GrdX', '').strip()]
    if not rows:
        return False
    k = collections.OrderedDict()
    t0 = min(num(r['Start (ns)']) for r in rows)
    t1 = max(num(r['Start (ns)']) + num(r['Duration (ns)']) for r in rows)
    for r in rows:
        short = r['Name'].split('(')[0].replace('void ', '')[:60]
        e = k.setdefault(short, {'n': 0, 't': 0.0, 'grid': ''})
        e['n'] += 1
        e['t'] += num(r['Duration (ns)'])
        e['grid'] = '%s x %s' % (r['GrdX'] if r.get('GrdY', '1') in ('1', '') else
                                 '%s,%s' % (r['GrdX'], r['GrdY']), r['BlkX'])
    total = sum(e['t'] for e in k.values())
    print('\n### %s: %d kernels, %.1f us of kernel time, step span %.1f us\n' %
          (path, sum(e['n'] for e in k.values()), total / 1e3, (t1 - t0) / 1e3))
    print('| kernel | launches | us | share | us per launch | last grid x block |')
    print('|---|---:|---:|---:|---:|---|')
    for name, e in sorted(k.items(), key=lambda kv: -kv[1]['t'])[:TOP]:
        print('| %s | %d | %.1f | %.1f%% | %.1f | %s |' %
              (name, e['n'], e['t'] / 1e3, 100 * e['t'] / total, e['t'] / e['n'] / 1e3, e['grid']))
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
