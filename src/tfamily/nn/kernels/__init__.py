"""Attention kernels. A new kernel registers its constructor in ``KERNELS``
(``tfamily.registry``); its keyword arguments are the spec's ``kernel.params``."""
from ...registry import KERNELS
from .base import Kernel, allowed_mask
from .reference import ReferenceKernel
from .sdpa import SDPAKernel
from .blocksparse import BlockSparseKernel
from .flex import FlexKernel
from .lsh import LSHKernel

# What a kernel's registration declares for its readers (spec/sizes.py, export/graphs.py, export/hf.py):
# scores: it holds every row's fp32 L x L scores; mask_unless: it makes an L x L mask for any pattern
# but these (a kernel with neither holds no L x L tensor); traced_as: how an exported graph runs it;
# untraceable: why no graph computes it; shared_qk: it needs shared-QK heads (tfamily/spec/part_checks.py).
KERNELS.register("reference", ReferenceKernel, scores=True)
KERNELS.register("sdpa", SDPAKernel, mask_unless=("causal", "full"))
KERNELS.register("blocksparse", BlockSparseKernel,
                 traced_as="the sparse pattern runs as a dense mask: the same outputs at dense cost")
KERNELS.register("flex", FlexKernel)
KERNELS.register("lsh", LSHKernel, shared_qk=True,  # Kitaev et al. 2020
                 untraceable="LSH attention draws fresh random rotations on every call and sorts keys by bucket, "
                             "so no fixed graph computes what the eager model does")

__all__ = ["Kernel", "allowed_mask", "ReferenceKernel", "SDPAKernel", "KERNELS",
           "BlockSparseKernel", "FlexKernel", "LSHKernel"]
