#!/usr/bin/env python3
# bench/ncu_summary.py — the kernels of an `ncu --metrics gpu__time_duration.sum --csv` log, summed by name: launches,
# total and mean microseconds, largest total first. Not a profiler: it reads what ncu wrote (lines before the CSV
# header, the program's own output, are skipped).
#   usage: bench/ncu_summary.py NCU.csv
import csv
import sys

SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_summary.py NCU.csv")
    with open(sys.argv[1], errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit("ncu_summary.py: no CSV header (\"ID\",...) in " + sys.argv[1])
    total = {}
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            us = float(row["Metric Value"].replace(",", "")) * SCALE.get(row["Metric Unit"], 1.0)
        except (KeyError, ValueError):
            continue
        name = row.get("Kernel Name", "?")[:110]
        n, t = total.get(name, (0, 0.0))
        total[name] = (n + 1, t + us)
    print("%8s %12s %10s  kernel" % ("launches", "total us", "mean us"))
    for name, (n, t) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        print("%8d %12.1f %10.2f  %s" % (n, t, t / n, name))


if __name__ == "__main__":
    main()
