"""The published InferenceX H200 TRT-LLM DeepSeek-R1 points recorded "tp8 ep1" (runs of 2025-11-02)
beside those recorded "tp8 ep8" (runs of 2025-12-15) at the same ISL, OSL and concurrency: their
mean TPOT, as published (perfmodel/data/published_serving.yaml). Before 2025-11-03 the script
dsr1_fp8_h200_trt_slurm.sh set EP_SIZE="$TP" whatever the run's config named
(perfmodel/inferencex.py), so both ran EP8.

    python evidence/server-settings/ep_in_script.py > evidence/server-settings/ep_in_script.txt
"""

from perfmodel import published_serving as ps


def main() -> None:
    pts = [p for p in ps.load() if p.setup.framework == "trt" and p.setup.hardware == "h200" and not p.setup.disagg
           and p.setup.spec_method == "none" and p.setup.tp == 8 and not p.setup.dp_attention]
    by = {}
    for p in pts:
        by.setdefault((p.point.isl, p.point.osl, p.point.conc), {})[p.setup.ep] = p
    print("isl   osl  conc  TPOT ms ep1 (date)        TPOT ms ep8 (date)        ep1 / ep8")
    for (isl, osl, conc), d in sorted(by.items()):
        if 1 in d and 8 in d:
            a, b = d[1], d[8]
            ta, tb = a.point.mean_tpot_s * 1e3, b.point.mean_tpot_s * 1e3
            print(f"{isl:5} {osl:5} {conc:4}  {ta:7.2f} ({a.point.date or a.setup.date})   {tb:7.2f} ({b.point.date or b.setup.date})"
                  f"   {ta / tb:6.3f}")


if __name__ == "__main__":
    main()
