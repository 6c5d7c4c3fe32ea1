"""``--paper``: a paper's figures reproduced, ours beside the paper's, and the closing tally."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def figure_table(figures):
    """Lines: label, ours, paper, ratio, and the closing ``within 20%`` tally."""
    width = max(len(f.label) for f in figures)
    lines = [f"{'figure':<{width}} {'ours':>9} {'paper':>9} {'ours/paper':>10}"]
    for f in figures:
        mark = "" if f.within else "  (off by more than 20%)"
        lines.append(f"{f.label:<{width}} {f.ours:>9.2f} {f.paper:>9.2f} {f.ours / f.paper:>10.2f}{mark}")
    lines.append(f"within 20% of the paper: {sum(f.within for f in figures)} of {len(figures)} figures")
    return lines


def bars(groups, series, title, ylabel, path, log=False):
    """Grouped bars: ``groups`` on x, one bar per key of ``series`` ({name: [value per group]})."""
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(groups)), 3.8))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))], values, width,
               label=name)
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    ax.set(title=title, ylabel=ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
