"""The graph passes npu-compile runs on AOT forward graphs, and their differential check.

``post_grad`` runs them in order (the user's passes, no-op removal, reinplacing) and is this
wing's door for the pipeline; ``reinplace`` writes functional ops into memory that is dead
afterwards, by the ops' alias schemas; ``check`` runs a graph as it was before each pass beside
the graph after it, at its first call (``debug.aclgraph.check_passes``), and names the first
pass that changed a value. Nothing here decides what a graph becomes: the planner says which
passes apply.
"""

from __future__ import annotations

from npu_compile._passes.check import PassTrail, checked
from npu_compile._passes.post_grad import check_decompositions, finish, run_post_grad_passes

__all__ = ["PassTrail", "check_decompositions", "checked", "finish", "run_post_grad_passes"]
