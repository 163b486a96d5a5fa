"""Parses sim.txt (run.sh) into results.json and prints the Markdown table of README.md."""
import json
import re
import statistics
import sys
from pathlib import Path

here = Path(__file__).parent
runs = []
for line in (here / "sim.txt").read_text().splitlines():
    head = dict(kv.split("=") for kv in line.split()[:3])
    ttfa = re.search(r"p50 ([\d.]+) ms p95 ([\d.]+) ms p99 ([\d.]+) ms", line)
    gaps = re.search(r"underruns: \d+ gaps in (\d+) of", line)
    calls = {
        stage: (int(c), float(r))
        for stage, c, r in re.findall(r"(prefill|code_predictor|talker_step) (\d+) calls x ([\d.]+) rows", line)
    }
    runs.append({
        "merge": head["merge"], "rate": int(head["rate"]), "seed": int(head["seed"]),
        "ttfa_ms": dict(zip(["p50", "p95", "p99"], map(float, ttfa.groups()))),
        "streams_with_gaps": int(gaps.group(1)),
        "calls": {s: {"calls": c, "mean_rows": r} for s, (c, r) in calls.items()},
    })
(here / "results.json").write_text(json.dumps({"runs": runs}, indent=1) + "\n")

def mean(xs):
    return statistics.mean(xs)

variants = ["off", "250", "600"]
print("| req/s | " + " | ".join(f"{v}: p50 / p95 / p99" for v in variants)
      + " | gaps " + " / ".join(variants) + " | code-predictor calls " + " / ".join(variants) + " |")
print("|---" * (len(variants) + 3) + "|")
for rate in sorted({r["rate"] for r in runs}):
    cells, gaps, cps = [], [], []
    for v in variants:
        sel = [r for r in runs if r["rate"] == rate and r["merge"] == v]
        if not sel:
            sys.exit(f"missing merge={v} rate={rate}")
        cells.append(" / ".join(f"{mean([r['ttfa_ms'][k] for r in sel]):.1f}" for k in ["p50", "p95", "p99"]))
        gaps.append(str(sum(r["streams_with_gaps"] for r in sel)))
        cps.append(f"{mean([r['calls']['code_predictor']['calls'] for r in sel]):.0f}")
    print(f"| {rate} | " + " | ".join(cells) + " | " + " / ".join(gaps) + " | " + " / ".join(cps) + " |")
