"""The second stage: the GPUs' time line over each scope's GPU windows.

:mod:`.busy` sweeps the time line once for every scope: each device's busy time (kernels, copies,
memsets, whole graphs) and its idle time by what happened at each idle instant; :mod:`.gaps`
charges each idle gap, whole, to what happened when the GPU ran out of work, which is what removing
that cause would win.
"""
