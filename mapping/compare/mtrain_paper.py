"""``python -m mapping.compare --paper mtrain``: MTrain section VI with our models."""

from ..mtrain import paper
from .paper_report import bars, figure_table


def run(out, progress=print):
    progress("MTrain section VI: Table II clusters, fp32, batch 64 / 16 / 64")
    figures = paper.figures(progress)
    print("\nspeedup of MTrain over HAP (ours) by P2P bandwidth")
    header = "".join(f"{g:>8g}" for g in paper.BANDWIDTHS)
    print(f"{'network':<11}{'cluster':>8}{header}  GB/s")
    series = {}
    for network in paper.NETWORKS:
        for cluster in paper.CLUSTERS:
            values = [paper.speedup_over_hap(network, cluster, 15.0)]
            series.setdefault(f"cluster {cluster}", []).append(values[0])
            if cluster == 1:
                sweep = [paper.speedup_over_hap(network, cluster, g) for g in paper.BANDWIDTHS]
                print(f"{network:<11}{cluster:>8}" + "".join(f"{v:>8.2f}" for v in sweep))
    out.mkdir(parents=True, exist_ok=True)
    bars(list(paper.NETWORKS), series, "MTrain Figs. 9-11 (ours): speedup over HAP at 15 GB/s",
         "speedup over HAP", out / "mtrain_speedup.png")
    print(f"\nwrote {out / 'mtrain_speedup.png'}\n")
    print("\n".join(figure_table(figures)))
