"""Draw the bar chart of a results file: ``python chart.py RESULTS.json OUT.png`` (run by run.py in .envs/tooling).

One panel per headline metric, one bar per engine (median), whiskers from min to max,
logarithmic axis where the engines differ by more than 20 times.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from run import METRICS, OURS  # noqa: E402  (the same list of metrics as the table)

COLORS = {"scaler": "#1f77b4", "opengris-scaler": "#ff7f0e", "dask": "#2ca02c", "processpool": "#7f7f7f",
          "mp-pool": "#bcbcbc"}  # fmt: skip


def main(json_path: str, png_path: str) -> None:
    data = json.load(open(json_path))
    summary = data["summary"]
    panels = [(w, m, label, higher) for w, m, label, higher in METRICS if w in summary]
    columns = 4
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    engines = data["engines"]
    for index, (workload, metric, label, higher) in enumerate(panels):
        axis = axes[index // columns][index % columns]
        names, medians, lows, highs, notes = [], [], [], [], []
        for engine in engines:
            entry = summary[workload].get(engine)
            stats = entry["metrics"].get(metric) if entry and entry["status"] == "ok" else None
            names.append(engine)
            if stats is None:
                medians.append(0)
                lows.append(0)
                highs.append(0)
                notes.append(("n/a" if entry["status"] == "ok" else entry["status"]) if entry else "not run")
            else:
                medians.append(stats["median"])
                lows.append(stats["median"] - stats["min"])
                highs.append(stats["max"] - stats["median"])
                notes.append("")
        positions = range(len(names))
        bars = axis.bar(positions, medians, color=[COLORS.get(name, "#9467bd") for name in names],
                        yerr=[lows, highs], capsize=3)  # fmt: skip
        positive = [value for value in medians if value > 0]
        if positive and max(positive) / min(positive) > 20:
            axis.set_yscale("log")
        for bar, note, value in zip(bars, notes, medians, strict=False):
            text = note if note else (f"{value:,.0f}" if value >= 100 else f"{value:.3g}")
            y = bar.get_height() if value > 0 else (min(positive) if positive and axis.get_yscale() == "log" else 0)
            axis.annotate(text, (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom", fontsize=7,
                          rotation=90 if note else 0, xytext=(0, 2), textcoords="offset points")  # fmt: skip
        size = next(iter(summary[workload].values()))["size"]
        axis.set_title(f"{label} ({size:,})\n{'higher' if higher else 'lower'} is better", fontsize=9)
        axis.set_xticks(list(positions))
        axis.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        axis.tick_params(axis="y", labelsize=8)
    for index in range(len(panels), rows * columns):
        axes[index // columns][index % columns].axis("off")
    machine = data["machine"]
    figure.suptitle(
        f"{OURS} vs peers, 2 workers, median of {data['repetitions']} (whiskers: min–max) — "
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['date']}, mode {data['mode']}",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(png_path, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
