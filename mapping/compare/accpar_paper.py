"""``python -m mapping.compare --paper accpar``: AccPar section 6 with our cost model."""

from ..accpar import paper
from ..accpar.search import STRATEGIES
from .paper_report import bars, figure_table


def run(out, progress=print):
    progress("AccPar section 6: speedups over DP (mini-batch 512, bfloat16)")
    figures, het, hom = paper.figures(progress)
    for array, table in (("128 TPU-v2 + 128 TPU-v3", het), ("128 TPU-v3", hom)):
        print(f"\n{array}: speedup over DP")
        print(f"{'network':<18}" + "".join(f"{s:>8}" for s in STRATEGIES))
        for name, row in table.items():
            print(f"{name:<18}" + "".join(f"{row[s]:>8.2f}" for s in STRATEGIES))
    print("\nFig. 7 (AlexNet, 128 TPU-v3, h = 7, batch 128): types by hierarchy level, top first")
    for level, choice in enumerate(paper.layer_types("alexnet-ungrouped", paper.homogeneous(7), 128), 1):
        print(f"  level {level}: " + " ".join(f"{k}:{v}" for k, v in choice.items()))
    progress("Fig. 8: VGG-19 on 2^h heterogeneous boards")
    sweep = paper.hierarchy_sweep()
    print("\nFig. 8 (VGG-19, heterogeneous, 2^h boards): speedup over DP")
    print(f"{'h':>3}" + "".join(f"{s:>8}" for s in STRATEGIES))
    for h, row in sweep.items():
        print(f"{h:>3}" + "".join(f"{row[s]:>8.2f}" for s in STRATEGIES))
    out.mkdir(parents=True, exist_ok=True)
    bars(list(het), {s: [het[n][s] for n in het] for s in STRATEGIES},
         "AccPar Fig. 5 (ours): 128 TPU-v2 + 128 TPU-v3", "speedup over DP", out / "accpar_fig5.png", log=True)
    bars(list(hom), {s: [hom[n][s] for n in hom] for s in STRATEGIES},
         "AccPar Fig. 6 (ours): 128 TPU-v3", "speedup over DP", out / "accpar_fig6.png", log=True)
    bars([f"h={h}" for h in sweep], {s: [sweep[h][s] for h in sweep] for s in STRATEGIES},
         "AccPar Fig. 8 (ours): VGG-19", "speedup over DP", out / "accpar_fig8.png")
    print(f"\nwrote {out / 'accpar_fig5.png'}, {out / 'accpar_fig6.png'}, {out / 'accpar_fig8.png'}\n")
    print("\n".join(figure_table(figures)))
