"""The tooling around the compiler: what ``npu-compile demo``, ``bench`` and ``diagnose`` run.

``demo_model`` is a small decoder language model built in code (never downloaded), ``demo`` the
eager-against-captured demo over it, ``bench`` the benchmark tables, ``timing`` the statistics
they and :mod:`npu_compile.diagnosis` share (alternated rounds, medians and their spread, the
host- or device-bound verdict), and ``device`` the device helpers they use (the best device,
synchronisation, versions, whether torch_npu loads). None of it is on the compile path; scripts
reach it through :mod:`npu_compile.tools`.
"""
