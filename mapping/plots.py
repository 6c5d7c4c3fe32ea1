"""Figures in the style of the paper's Fig. 14 (per-device utilisation) and Fig. 15 (scaling)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import MaxNLocator  # noqa: E402


def utilisation(mapping, title, path):
    """Per-device DSP and block-RAM utilisation bars (paper Fig. 14)."""
    per_node = mapping.summary["per_node"]
    x = range(len(per_node))
    fig, ax = plt.subplots(figsize=(max(6, len(per_node) * 0.35), 3.5))
    ax.bar([i - 0.2 for i in x], [100 * p["dsp_util"] for p in per_node], 0.4, label="DSP")
    ax.bar([i + 0.2 for i in x], [100 * p["bram_util"] for p in per_node], 0.4, label="block RAM")
    ax.set(xlabel="device (node index)", ylabel="utilisation (%)", ylim=(0, 100), title=title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def scaling(points, link_gbps, title, path):
    """Throughput roofline and idle stages against cluster size (paper Fig. 15); sizes the
    network does not fit are marked on the device axis and listed in the legend."""
    ok = [p for p in points if "error" not in p]
    refused = [p["devices"] for p in points if "error" in p]
    n = [p["devices"] for p in ok]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    top.plot(n, [p["compute_samples_per_s"] for p in ok], "o-", ms=3, label="compute bound")
    top.plot(n, [p["link_samples_per_s"] for p in ok], "--", label=f"link bound ({link_gbps:g} Gb/s)")
    top.plot(n, [p["samples_per_s"] for p in ok], "k-", lw=2, label="roofline")
    top.set(ylabel="samples/s", title=title)
    top.set_yscale("log")
    bottom.plot(n, [100 * p["idle"] for p in ok], "o-", ms=3)
    bottom.set(xlabel="devices", ylabel="idle stages (%)")
    if refused:
        listed = ", ".join(map(str, refused[:8])) + (", ..." if len(refused) > 8 else "")
        for ax in (top, bottom):
            ax.plot(refused, [0] * len(refused), "rx", ms=6, clip_on=False,
                    transform=ax.get_xaxis_transform(), label=f"refused: {listed}")
    top.legend(fontsize=8)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def training_curves(curves, path):
    """Test accuracy per epoch of several training runs (paper Fig. 16): ``curves`` is
    [(name, [(epoch, train loss, test accuracy), ...]), ...]."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, points in curves:
        ax.plot([p[0] for p in points], [p[2] for p in points], marker="o", label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
