"""The CPU stages of the pipeline; they need no GPU and import only ``ptxgym.records``.

In order: ``extract`` (code out of a model response), ``screen`` (the source screen: banned headers,
libraries, directives), ``build`` (nvcc to a shared object, cached), ``ptxas`` (the resource report), ``sass``
(the cuobjdump census), and ``toolchain`` (finding nvcc, cuobjdump and TVM-FFI).
"""
