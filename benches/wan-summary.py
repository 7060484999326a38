#!/usr/bin/env python3
"""Summarises benches/wan.sh: per round trip and contender, the median of each measure over the
rounds with its range, then the ratios the WAN goals name. A ratio is printed only when its
rounds agree: when the range of the per-round ratios is wider than the distance of their median
from 1, the line says the difference is not measurable instead.

Usage: benches/wan-summary.py RESULTS_DIR COMMAND
"""
import json
import pathlib
import sys

from rounds import ratio_line, spread


def runs(directory):
    """(round, rtt, results) of every run's JSON file under directory/roundN-rttM/."""
    for path in sorted(pathlib.Path(directory).glob("round*-rtt*/*.json")):
        round_, rtt = path.parent.name.removeprefix("round").split("-rtt")
        yield int(round_), int(rtt), json.loads(path.read_text())


def measures(results):
    """contender -> {measure: value} for the (one) record size of one run."""
    out = {}
    for size in results["sizes"]:
        for contender, drain in size["drains"]:
            m = out.setdefault(contender, {})
            m["records/s"] = drain["records_per_second"]
            m["records/CPU-s"] = drain["records_per_cpu_second"]
        for contender, rnd in size["steady"]:
            m = out.setdefault(contender, {})
            m["p50 ms"] = rnd["p50_ms"]
            m["p99 ms"] = rnd["p99_ms"]
    return out


def main():
    directory, command = sys.argv[1], sys.argv[2]
    table = {}  # (rtt, contender) -> measure -> [values by round]
    by_round = {}  # (round, rtt) -> contender -> measures
    for round_, rtt, results in runs(directory):
        m = measures(results)
        by_round[(round_, rtt)] = m
        for contender, values in m.items():
            for measure, value in values.items():
                table.setdefault((rtt, contender), {}).setdefault(measure, []).append(value)
    rtts = sorted({rtt for rtt, _ in table})
    names = ["records/s", "records/CPU-s", "p50 ms", "p99 ms"]
    print(f"Command: `{command}`\n")
    print("| round trip | contender | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for (rtt, contender), values in sorted(table.items()):
        cells = [spread(values[n], 0) if n in values else "-" for n in names]
        print(f"| {rtt} ms | {contender} | " + " | ".join(cells) + " |")
    print("\nMedians with their range over the rounds.\n")
    rounds = sorted({r for r, _ in by_round})

    def per_round(fn):
        out = []
        for r in rounds:
            try:
                out.append(fn(r))
            except (KeyError, ZeroDivisionError):
                pass
        return out

    def ratio(name, num, den):
        """A ratio line over the rounds where both measures exist: num and den are (rtt,
        contender, measure)."""
        return ratio_line(name, per_round(lambda r: by_round[(r, num[0])][num[1]][num[2]] / by_round[(r, den[0])][den[1]][den[2]]))

    contenders = {c for _, c in table}
    straits = [c for c in ("strait", "strait-wan") if c in contenders]
    mm2s = [c for c in ("mm2", "mm2-stock", "mm2-wan") if c in contenders]
    print("| ratio | median | spread |\n|---|---|---|")
    for rtt in (r for r in rtts if r > 0):
        for s in straits:
            print(ratio(f"{s} drain at {rtt} ms / at 0 ms (goal at 100 ms: ≥ 0.8)", (rtt, s, "records/s"), (0, s, "records/s")))
    for rtt in rtts:
        for s in straits:
            for m in mm2s:
                print(ratio(f"{s} / {m} drain at {rtt} ms (goal at 100 ms, against mm2: ≥ 3)", (rtt, s, "records/s"), (rtt, m, "records/s")))
                print(ratio(f"{s} / {m} records per CPU-second at {rtt} ms", (rtt, s, "records/CPU-s"), (rtt, m, "records/CPU-s")))
    if "ceiling" in contenders:
        for rtt in rtts:
            for s in straits:
                print(ratio(f"{s}'s CPU per record / the bare loop's at {rtt} ms (issue 15's goal: ≤ 1.1)", (rtt, "ceiling", "records/CPU-s"), (rtt, s, "records/CPU-s")))
    print("\np99 at the fixed rate against the goal of the round trip + 50 ms:\n")
    print("| round trip | contender | p99 ms, median (range) | goal ms | rounds within it |\n|---|---|---|---|---|")
    for (rtt, contender), values in sorted(table.items()):
        if "p99 ms" in values:
            p99 = values["p99 ms"]
            within = sum(v <= rtt + 50 for v in p99)
            print(f"| {rtt} ms | {contender} | {spread(p99, 0)} | {rtt + 50} | {within} of {len(p99)} |")

if __name__ == "__main__":
    main()
