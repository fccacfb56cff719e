"""LSH attention: the Reformer's sort-and-chunk kernel (Kitaev et al. 2020, section 2).

layout.py hashes and fixes every query's window per round; chunks.py computes whole sequences
(memory-efficient autograd function and plain autograd); rows.py serves some query rows only
(decoding with a cache) with the same windows; reference.py holds the dense definitions the
fast paths are tested against; kernel.py is the registered kernel. Cost per round is
O(L log L) for the sort and O(L * chunk_len) for the scores; no L x L tensor exists.
"""
from .kernel import LSHKernel
from .layout import Layout, lsh_buckets, make_layout
from .reference import dense_shared_qk, lsh_reference, lsh_windows

__all__ = ["LSHKernel", "Layout", "lsh_buckets", "make_layout", "dense_shared_qk", "lsh_reference",
           "lsh_windows"]
