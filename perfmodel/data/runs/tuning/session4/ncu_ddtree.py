import torch
from perfmodel.kernels import ddtree
C, D, V, B = 8, 15, 163840, 256
logits = torch.randn(C, D, V, device="cuda", dtype=torch.bfloat16) * 3
for _ in range(3):
    ddtree.build_ddtree_gpu(logits, B)
torch.cuda.synchronize()
