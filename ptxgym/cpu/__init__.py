"""The CPU stages of the pipeline; they need no GPU and import only ``ptxgym.records``.

In order: ``extract`` (code out of a model response), ``screen`` (the source screen: banned headers,
libraries, directives), ``build`` (nvcc to a shared object, cached), ``ptxas`` (the resource report), ``sass``
(the cuobjdump census), and ``toolchain`` (finding nvcc, cuobjdump and TVM-FFI).
"""

from ptxgym.cpu.build import BuildOutcome, build_solution
from ptxgym.cpu.extract import extract_code
from ptxgym.cpu.ptxas import parse_ptxas_report
from ptxgym.cpu.sass import sass_census
from ptxgym.cpu.screen import check_source
from ptxgym.cpu.toolchain import Toolchain, find_toolchain

__all__ = [
    "BuildOutcome",
    "Toolchain",
    "build_solution",
    "check_source",
    "extract_code",
    "find_toolchain",
    "parse_ptxas_report",
    "sass_census",
]
