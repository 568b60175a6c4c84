"""tools: GPU tuning and diagnosis tools, run by hand from the repository root (`python -m
tools.<name>`), never by `perfmodel measure` or the tests' CPU path. Not shipped in the wheel;
they import `perfmodel.kernels` and `perfmodel.measure`, and nothing in the package imports them.

Timing (a CUDA GPU; a kernel's variants over given shapes, timed as its bench times it):
    ab                    interleaved A/B of a kernel's variants (knobs, module constants, another copy of its module)
    sweep                 tile / config sweeps: the cross product of knob values, saved as a table
    stress                many eager calls, each output checked: results that are only sometimes wrong
    ncu                   an Nsight Compute target: one shape and variant, called a few times
    eager_step_host_time  where an eager decode step's host time goes, by call site
    eager_launch_parts    where one eager Triton launch's host time goes
Offline (no GPU: Triton's sm_90 compile, its bundled ptxas and cuobjdump):
    offline_compile       registers, spills, shared memory and MMA kind of a kernel's variants
    sass_census           SASS instructions per weight in the W4A16 MoE GEMM's main loop
    ptx_fingerprint       hashes of the kernels' PTX: a refactor that keeps them needs no GPU A/B
CPU:
    wrapper_host_cost     the attention and MoE wrappers' own Python per eager call, launches stubbed out

The kernels' shapes and knobs are written as in tools/_cli.py. What the logs of earlier runs
showed, and which default each backs, is indexed in evidence/README.md.
"""
