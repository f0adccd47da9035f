#!/usr/bin/env python3
"""kf-ab: an A/B of kf-bench rows under several values of one environment variable.

Runs kf-bench once per value and pass, in one process each (the library reads its switches once
a process), and reads the rows back from kf-bench's JSON. The values take turns: pass p runs
them rotated by p, so that over as many passes as values each value runs once in each place.
(2026-12-06, one H100 call: two forms running the same code read up to 2.3 points of copy apart,
the one run first higher in 45 of 56 pairs, so a fixed order reads as a difference between
forms.) After every run the summary (ab.md) is rewritten, so a call cut off by a time limit
still leaves what it measured; each run's JSON and output stay beside it, and ab.tar.gz packs
them all (a device call returns few files).

Usage:
  bench/kf_ab.py [--kf-bench PATH] [--passes N] [--out DIR] VAR=V1,V2[,...] -- [kf-bench options]
A value of '-' runs with VAR unset. --json is kf-ab's; do not pass it to kf-bench.

The summary lists, per row (op rows and elementwise rows: % of copy; fusion rows: % of copy, or
microseconds where they have no traffic), each value's readings in pass order, and each later
value's difference from the first, paired by pass (min..max). Exit status: 0 when every run
exited 0 and no checked row failed, 1 otherwise, 2 for a usage error.
"""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time


def parse_setting(text):
    """VAR=V1,V2,... -> (VAR, [V1, V2, ...]); raises ValueError when malformed."""
    name, sep, values = text.partition("=")
    if not sep or not name or not name.replace("_", "").isalnum() or name[0].isdigit():
        raise ValueError(f"'{text}' is not VAR=V1,V2,...")
    items = values.split(",")
    if len(items) < 2 or any(not v for v in items):
        raise ValueError(f"'{text}' needs two or more non-empty values")
    if len(set(items)) != len(items):
        raise ValueError(f"'{text}' names a value twice")
    return name, items


def pass_order(values, p):
    """The values in the order pass p runs them: rotated by p."""
    k = p % len(values)
    return values[k:] + values[:k]


def rows_of(doc):
    """{key: (reading, unit, failed)} for every row of a kf-bench JSON document. A key that
    repeats within the document (rows the JSON tells apart by nothing kf-ab reads) takes its
    ordinal, " #2" on, so that no row hides another."""
    rows = {}

    def put(key, reading, unit, row):
        unique, n = key, 2
        while unique in rows:
            unique, n = f"{key} #{n}", n + 1
        rows[unique] = (reading, unit, row.get("failed", False))

    for r in doc.get("op_rows") or []:
        key = " ".join([r["op"], r["variant"], r["dtype"], "x".join(map(str, r["shape"]))])
        put(key, r["percent_of_copy"], "%", r)
    for r in doc.get("results") or []:
        what = [r["op"], r["activation"]] + (["bias"] if r.get("bias") else [])
        put(" ".join(what + [r["dtype"], "x".join(map(str, r["shape"])), r["size_class"]]),
            r["percent_of_copy"], "%", r)
    for r in doc.get("fusion_rows") or []:
        key = " ".join([r["case"], r["variant"], r["shape"]])
        if r.get("percent_of_copy"):
            put(key, r["percent_of_copy"], "%", r)
        else:
            put(key, r["us"], "us", r)
    return rows


def label(v):
    """How a value reads in the summary: '-' is the variable unset."""
    return "(unset)" if v == "-" else v


def file_label(values, v):
    """A file-name-safe label of value v: its place in the list and its letters and digits."""
    safe = "".join(c if c.isalnum() or c in "._" else "_" for c in v)
    return f"v{values.index(v)}-{'unset' if v == '-' else safe}"


def fmt(x):
    return "-" if x is None else f"{x:.1f}" if abs(x) >= 0.95 or x == 0 else f"{x:.3g}"


def summary(var, values, passes, runs):
    """The Markdown summary of the runs so far. runs: {(p, value): {...}} in the order run."""
    lines = [f"# kf-ab: {var} = {' / '.join(map(label, values))}", ""]
    for p in range(passes):
        order = " -> ".join(map(label, pass_order(values, p)))
        lines.append(f"- pass {p + 1}: {order}")
    lines.append("")
    lines.append("| run | exit | device | copy ceiling GB/s | rows | started |")
    lines.append("|---|---|---|---|---|---|")
    for (p, v), run in runs.items():
        lines.append(f"| pass {p + 1}, {var}={label(v)} | {run['rc']} | {run['device']} | "
                     f"{fmt(run['ceiling'])} | {len(run['rows'])} | {run['started']} |")
    lines.append("")
    keys = []
    for run in runs.values():
        keys += [k for k in run["rows"] if k not in keys]
    if not keys:
        lines.append("No rows yet.")
        return "\n".join(lines) + "\n"
    head = ["row", "unit"] + [f"{var}={label(v)}" for v in values]
    head += [f"{label(v)} - {label(values[0])}" for v in values[1:]]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    failed_rows = []
    for key in keys:
        unit = None
        cells = []
        readings = {}
        for v in values:
            got = []
            for p in range(passes):
                row = runs.get((p, v), {}).get("rows", {}).get(key)
                got.append(None if row is None else row[0])
                if row is not None:
                    unit = row[1]
                    if row[2]:
                        failed_rows.append(f"{key} ({var}={label(v)}, pass {p + 1})")
            readings[v] = got
            cells.append(" / ".join(fmt(x) for x in got))
        for v in values[1:]:
            diffs = [b - a for a, b in zip(readings[values[0]], readings[v])
                     if a is not None and b is not None]
            cells.append(f"{min(diffs):+.1f}..{max(diffs):+.1f}" if diffs else "-")
        lines.append("| " + " | ".join([key, unit or "-"] + cells) + " |")
    if failed_rows:
        lines.append("")
        lines.append("Rows whose check failed: " + "; ".join(failed_rows))
    return "\n".join(lines) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(
        prog="kf_ab.py", description=__doc__.split("\n\n")[0],
        usage="%(prog)s [--kf-bench PATH] [--passes N] [--out DIR] VAR=V1,V2[,...] "
              "-- [kf-bench options]")
    parser.add_argument("--kf-bench", default="build/bench/kf-bench", help="the kf-bench to run")
    parser.add_argument("--passes", type=int, default=2, help="passes over the values (default 2)")
    parser.add_argument("--out", default="ab", help="directory for the runs and ab.md (default ab)")
    parser.add_argument("setting", help="VAR=V1,V2,...: the variable and its values")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER,
                        help="after --: kf-bench's options")
    args = parser.parse_args(argv)
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    try:
        var, values = parse_setting(args.setting)
    except ValueError as e:
        parser.error(str(e))
    if args.passes < 1:
        parser.error("--passes takes a whole number >= 1")
    if any(a == "--json" or a.startswith("--json=") for a in bench_args):
        parser.error("--json is kf-ab's own (each run's JSON goes to --out)")
    if not os.access(args.kf_bench, os.X_OK):
        parser.error(f"no kf-bench at {args.kf_bench} (--kf-bench PATH)")

    os.makedirs(args.out, exist_ok=True)
    runs = {}
    failed = False
    summary_path = os.path.join(args.out, "ab.md")
    packed = ["ab.md"]  # this A/B's files (not an earlier one's left in --out)
    for p in range(args.passes):
        for v in pass_order(values, p):
            stem = os.path.join(args.out, f"pass{p + 1}-{file_label(values, v)}")
            env = dict(os.environ)
            if v == "-":
                env.pop(var, None)
            else:
                env[var] = v
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            if os.path.exists(stem + ".json"):
                os.remove(stem + ".json")  # nothing of an earlier run may pass for this one's
            with open(stem + ".log", "w") as log:
                rc = subprocess.run([args.kf_bench, *bench_args, "--json", stem + ".json"],
                                    env=env, stdout=log, stderr=subprocess.STDOUT).returncode
            packed += [os.path.basename(stem + ext) for ext in (".log", ".json")
                       if os.path.exists(stem + ext)]
            run = {"rc": rc, "rows": {}, "device": "-", "ceiling": None, "started": started}
            try:
                with open(stem + ".json") as f:
                    doc = json.load(f)
                run["rows"] = rows_of(doc)
                run["device"] = (doc.get("device") or {}).get("name", "-")
                run["ceiling"] = (doc.get("copy_ceiling") or {}).get("gbps")
            except (OSError, ValueError, KeyError) as e:
                print(f"kf_ab.py: pass {p + 1}, {var}={label(v)}: no readable JSON ({e}); "
                      f"see {stem}.log", file=sys.stderr)
                rc = rc or 1
                run["rc"] = rc
            failed |= rc != 0 or any(r[2] for r in run["rows"].values())
            runs[(p, v)] = run
            with open(summary_path, "w") as f:
                f.write(summary(var, values, args.passes, runs))
            print(f"kf_ab.py: pass {p + 1}, {var}={label(v)}: exit {rc}, {len(run['rows'])} rows",
                  flush=True)
    with tarfile.open(os.path.join(args.out, "ab.tar.gz"), "w:gz") as tar:
        for name in packed:
            tar.add(os.path.join(args.out, name), arcname=name)
    with open(summary_path) as f:
        sys.stdout.write(f.read())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
