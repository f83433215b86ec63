"""A ``BuiltCandidate`` from CUDA source text, built as the pipeline builds it (GPU tests' helper)."""

from __future__ import annotations

import hashlib

from ptxgym.evaluation.trusted.base import BuiltCandidate


def built_candidate(task, source: str) -> BuiltCandidate:
    """nvcc with the task's pack headers, then the SASS census; the build must succeed."""
    from ptxgym.cpu.build import build_solution
    from ptxgym.cpu.sass import sass_census
    from ptxgym.knowledge_packs.include_tree import pack_include_dirs
    from ptxgym.records.schema import Solution

    solution = Solution.from_cuda_source(source, task.definition.name, arch=task.arch)
    built = build_solution(solution, task.arch_spec, include_dirs=pack_include_dirs(task.arch))
    assert built.so_path is not None, built.message
    census = sass_census(built.so_path, task.arch_spec)
    return BuiltCandidate(
        task_id=task.id,
        so_path=built.so_path,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        artifact_sha256=hashlib.sha256(built.so_path.read_bytes()).hexdigest(),
        static_target=census.static_target,
        kernels=[k.kernel for k in census.kernels],
    )
