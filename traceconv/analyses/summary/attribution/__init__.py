"""The third stage: who made what. The host ranges' trees (operators, annotations, NVTX ranges and
the CUDA calls inside them, :mod:`.tree`, :mod:`.leaves`, :mod:`.leaf_gpu`) with the GPU time
each range launched; the GPU rows per kernel, copy direction and launch (:mod:`.gpu`); the syncs
that block the host and what caused them (:mod:`.syncs`); the operators' input shapes (:mod:`.ops`).
"""
