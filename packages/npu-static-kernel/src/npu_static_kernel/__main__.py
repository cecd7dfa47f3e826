"""``python -m npu_static_kernel`` runs the command line (the same as ``npu-static-kernel``)."""

from __future__ import annotations

import sys

from npu_static_kernel.cli import main

sys.exit(main())
