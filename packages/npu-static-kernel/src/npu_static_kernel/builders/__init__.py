"""Static kernel builders: the builder interface and the two builders this package ships.

A builder turns one graph, specialised to one set of argument shapes, into an artifact on disk
and back into a callable. :class:`~npu_static_kernel.StaticKernelCompiler` and the generic
:class:`~npu_static_kernel.ArtifactCache` drive it through :class:`StaticKernelBuilder`, in
this order:

1. :meth:`~StaticKernelBuilder.compute_hash`: text hashed into the cache key, covering every
   setting and toolchain version that changes the artifact (with :attr:`~StaticKernelBuilder.name`).
2. :meth:`~StaticKernelBuilder.supports_op`: which recorded ops go to the compile list of the op
   statistics.
3. :meth:`~StaticKernelBuilder.build`: only on a cache miss, into an empty staging directory that
   the cache verifies and renames into place when it returns.
4. :meth:`~StaticKernelBuilder.install`: once per node, after a build or on a cache hit.
5. :meth:`~StaticKernelBuilder.load`: on every process; returns the callable to run instead of
   ``gm.forward``.

Removing an artifact (``ArtifactCache.remove``, ``npu-static-kernel clean``) calls the class
method :meth:`~StaticKernelBuilder.uninstall` of the builder that made it, to undo what
:meth:`~StaticKernelBuilder.install` changed outside the artifact. The cache reads the builder's
:attr:`~StaticKernelBuilder.name` from the artifact's ``meta.json`` and finds the class in a
registry that every subclass joins when it is defined, so the cache never imports a builder
module.

To plug in a builder, subclass :class:`StaticKernelBuilder` with a unique ``name``, implement
``build`` and ``load`` (override the other hooks as needed), and pass an instance as
``StaticKernelCompiler(..., builder=...)``. Its module must be imported before ``clean`` runs for
the uninstall hook to be found.

Builders here:

- :class:`InductorBuilder`: TorchInductor's ``standalone_compile`` for CUDA and CPU.
- :class:`AscendBuilder`: CANN's static kernel compiler for Ascend NPUs; the names it shares
  with CANN live in ``npu_static_kernel._cann_names``.
"""

from __future__ import annotations

from npu_static_kernel._interface import BuildRequest, StaticKernelBuilder
from npu_static_kernel.builders._ascend import AscendBuilder
from npu_static_kernel.builders._inductor import InductorBuilder

__all__ = ["AscendBuilder", "BuildRequest", "InductorBuilder", "StaticKernelBuilder"]
