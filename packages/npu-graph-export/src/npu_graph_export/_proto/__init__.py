"""Generated GE IR bindings (``proto/ge_ir.proto``); regenerate with ``nox -s protos``."""
