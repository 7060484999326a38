#!/usr/bin/env python3
"""Summarises benches/passthrough.sh: per data, record size and contender, the median of each
measure over the rounds with its range, then per data and size how the pass-through compares
with the librdkafka loop (ratios printed only when their rounds agree, see rounds.py).

Usage: benches/passthrough-summary.py RESULTS_DIR COMMAND
"""
import json
import pathlib
import sys

from rounds import ratio_line, spread

NAMES = ["records/s", "MB/s", "CPU-s per GB", "target B/record"]


def runs(directory):
    """(round, data, size, contender, drain) of every drain under directory/roundN-DATA-SIZE/."""
    for path in sorted(pathlib.Path(directory).glob("round*-*-*/*.json")):
        round_, data, size = path.parent.name.removeprefix("round").split("-")
        for s in json.loads(path.read_text())["sizes"]:
            for contender, drain in s["drains"]:
                yield int(round_), data, int(size), contender, drain


def measures(drain):
    return {
        "records/s": drain["records_per_second"],
        "MB/s": drain["mb_per_second"],
        "CPU-s per GB": drain["cpu_seconds"] / (drain["bytes"] / 1e9),
        "target B/record": drain["target_bytes_per_record"],
    }


def main():
    directory, command = sys.argv[1], sys.argv[2]
    table = {}  # (data, size, contender) -> measure -> [values]
    by_round = {}  # (round, data, size, contender) -> measures
    for round_, data, size, contender, drain in runs(directory):
        m = measures(drain)
        by_round[(round_, data, size, contender)] = m
        for name, value in m.items():
            table.setdefault((data, size, contender), {}).setdefault(name, []).append(value)
    print(f"Command: `{command}`\n")
    print("| data | size | contender | " + " | ".join(NAMES) + " |")
    print("|---|---|---|" + "---|" * len(NAMES))
    for (data, size, contender), values in sorted(table.items()):
        cells = [spread(values[n], 2 if n == "CPU-s per GB" else 1) for n in NAMES]
        print(f"| {data} | {size} B | {contender} | " + " | ".join(cells) + " |")
    print("\nMedians with their range over the rounds.\n")
    print("| ratio | median | spread |\n|---|---|---|")
    rounds = sorted({r for r, *_ in by_round})
    for data, size in sorted({(d, s) for d, s, _ in table}):
        def per_round(measure, invert=False):
            out = []
            for r in rounds:
                p, c = by_round.get((r, data, size, "passthrough")), by_round.get((r, data, size, "ceiling"))
                if p and c and p[measure] and c[measure]:
                    out.append(c[measure] / p[measure] if invert else p[measure] / c[measure])
            return out

        print(ratio_line(f"{data} {size} B: ceiling CPU per GB / pass-through's", per_round("CPU-s per GB", invert=True)))
        print(ratio_line(f"{data} {size} B: pass-through drain / ceiling's", per_round("MB/s")))


if __name__ == "__main__":
    main()
