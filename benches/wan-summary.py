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
    """contender -> {measure: value} for the 1 KiB size of one run."""
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
        cells = [spread(values[n]) if n in values else "-" for n in names]
        print(f"| {rtt} ms | {contender} | " + " | ".join(cells) + " |")
    print("\nMedians with their range over the rounds.\n")
    far = max(rtts)
    rounds = sorted({r for r, _ in by_round})

    def per_round(fn):
        out = []
        for r in rounds:
            try:
                out.append(fn(r))
            except (KeyError, ZeroDivisionError):
                pass
        return out

    print("| ratio | median | spread |\n|---|---|---|")
    print(ratio_line(
        f"strait drain at {far} ms / at 0 ms",
        per_round(lambda r: by_round[(r, far)]["strait"]["records/s"] / by_round[(r, 0)]["strait"]["records/s"]),
    ))
    for rtt in rtts:
        print(ratio_line(
            f"strait / MM2 drain at {rtt} ms",
            per_round(lambda r: by_round[(r, rtt)]["strait"]["records/s"] / by_round[(r, rtt)]["mm2"]["records/s"]),
        ))
        print(ratio_line(
            f"strait / MM2 records per CPU-second at {rtt} ms",
            per_round(lambda r: by_round[(r, rtt)]["strait"]["records/CPU-s"] / by_round[(r, rtt)]["mm2"]["records/CPU-s"]),
        ))


if __name__ == "__main__":
    main()
