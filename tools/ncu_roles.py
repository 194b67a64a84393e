#!/usr/bin/env python3
"""Stall samples per role of a warp-specialized kernel, from the source CSV that
`CHORD_NCU_SOURCE=1 tools/profile_kernels.sh` writes (ncu's SASS view with stall samples per instruction).

  tools/ncu_roles.py SOURCE_CSV [--names prologue,S,PV2,producer] [--top 8]

The kernel's code is split at its setmaxnreg instructions (each role's branch starts with one), in code
order; only the first profiled launch is read (the CSV holds every launch's SASS one after another). Per
region: its share of the samples, the largest stall reasons, and its instructions with the most samples.
"""
import argparse
import csv


def count(x):
    try:
        return int(x)
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--names", default="prologue,S,PV2,producer", help="region names in code order")
    ap.add_argument("--top", type=int, default=8, help="instructions listed per region")
    args = ap.parse_args()

    rows = list(csv.reader(open(args.csv, newline="")))
    header, body = rows[1], [r for r in rows[2:] if len(r) > 4]
    samples = header.index("Warp Stall Sampling (All Samples)")
    reasons = [(i, h) for i, h in enumerate(header) if h.startswith("stall_") and "(Not Issued)" not in h]
    # Launches follow each other: the second PREEXIT starts the second launch's code.
    starts = [i for i, r in enumerate(body) if r[1].strip().startswith("PREEXIT")]
    if len(starts) > 1:
        body = body[: starts[1]]
    cuts = [0] + [i for i, r in enumerate(body) if "SETMAXREG" in r[1]] + [len(body)]
    names = args.names.split(",")
    if len(names) != len(cuts) - 1:
        raise SystemExit(f"{len(cuts) - 1} regions (setmaxnreg splits) but {len(names)} names")
    total = sum(count(r[samples]) for r in body) or 1
    for name, a, b in zip(names, cuts, cuts[1:]):
        seg = body[a:b]
        n = sum(count(r[samples]) for r in seg)
        by_reason = sorted(((sum(count(r[i]) for r in seg), h) for i, h in reasons), reverse=True)[:6]
        print(f"{name:9s} {n:6d} ({100 * n / total:4.1f}%)  " + ", ".join(f"{h} {v}" for v, h in by_reason))
        for r in sorted(seg, key=lambda r: -count(r[samples]))[: args.top]:
            top = sorted(((count(r[i]), h) for i, h in reasons), reverse=True)[:2]
            print(f"      {count(r[samples]):5d} {r[1].strip()[:60]:60s} {[(h, v) for v, h in top]}")


if __name__ == "__main__":
    main()
