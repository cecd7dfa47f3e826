"""``python -m npu_compile`` runs the command line (the same as ``npu-compile``)."""

from __future__ import annotations

import sys

from npu_compile.cli import main

sys.exit(main())
