"""``python -m npu_compile`` runs the command line, as the ``npu-compile`` script does.

Both call the same ``main``; the script reaches it through the public ``npu_compile.cli``.
"""

from __future__ import annotations

import sys

from npu_compile._cli.commands import main

sys.exit(main())
