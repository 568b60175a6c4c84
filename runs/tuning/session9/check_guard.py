"""Does the GPU guard test catch the race? Run it with the atomic read off (expected: fails) and on."""
import sys

sys.path.insert(0, sys.argv[1])
import test_kernel_moe_w4a16 as t  # noqa: E402

from perfmodel.kernels import moe_w4a16 as m  # noqa: E402

for atomic_read in (False, True, False, True):
    m.ATOMIC_READ = atomic_read
    try:
        t.test_pair_layer_never_drops_adds_under_back_to_back_calls()
        print(f"ATOMIC_READ={atomic_read}: test passed", flush=True)
    except AssertionError as e:
        print(f"ATOMIC_READ={atomic_read}: test FAILED: {str(e).splitlines()[0]}", flush=True)
