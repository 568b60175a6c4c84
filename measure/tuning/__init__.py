"""perfmodel.measure.tuning: GPU tuning and diagnosis tools, run by hand (never by `perfmodel
measure` or the tests' CPU path). Each is a module with a `main()`:

    python -m perfmodel.measure.tuning.tune_moe          # W4A16 / bf16 MoE tile sweeps
    python -m perfmodel.measure.tuning.tune_attention    # tree-attention (MLA) tile sweeps
    python -m perfmodel.measure.tuning.sass_census       # SASS instructions per weight (offline sm_90)
    python -m perfmodel.measure.tuning.w4a16_ab_configs  # W4A16 tile configs, whole op, interleaved
    python -m perfmodel.measure.tuning.w4a16_ab_swap     # W4A16 block_m 16 vs 8, whole op, interleaved
    python -m perfmodel.measure.tuning.treebuild_parts   # DDTree builder time per part
    python -m perfmodel.measure.tuning.ncu_moe [I] [T]   # Nsight Compute target: INT4 MoE GEMMs
    python -m perfmodel.measure.tuning.ncu_ddtree        # Nsight Compute target: DDTree builder

Their outputs, and what was concluded from them, are indexed in `runs/README.md`.
"""
