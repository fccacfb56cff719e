"""Attention kernels. A new kernel registers its constructor in ``KERNELS``
(``tfamily.registry``); its keyword arguments are the spec's ``kernel.params``."""
from ...registry import KERNELS
from .base import Kernel, allowed_mask
from .reference import ReferenceKernel
from .sdpa import SDPAKernel
from .blocksparse import BlockSparseKernel
from .flex import FlexKernel
from .lsh import LSHKernel

KERNELS.register("reference", ReferenceKernel)
KERNELS.register("sdpa", SDPAKernel)
KERNELS.register("blocksparse", BlockSparseKernel)
KERNELS.register("flex", FlexKernel)
KERNELS.register("lsh", LSHKernel)  # Kitaev et al. 2020; needs heads.shared_qk (tfamily/checks.py)

__all__ = ["Kernel", "allowed_mask", "ReferenceKernel", "SDPAKernel", "KERNELS",
           "BlockSparseKernel", "FlexKernel", "LSHKernel"]
