"""``python -m npu_graph_export`` runs the command line."""

from __future__ import annotations

import sys

from npu_graph_export.cli import main

sys.exit(main())
