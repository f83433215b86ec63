"""The task prompt: system message (role, rules, ABI, knowledge pack) and the first user message.

``reset()`` of every env returns ``build_task_prompt(task, variant)``; policies turn it and the rendered
feedback of each turn into chat messages. The knowledge-pack text comes from
``ptxgym.knowledge_packs`` (a named prompt variant); ``variant=None`` gives the rules and ABI only.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict

from ptxgym.records.tasks import Task

_ROLE = (
    "You are an expert GPU kernel engineer. You write CUDA C++ with inline PTX for NVIDIA {family} GPUs "
    "({arch}: {gpus}) that must be correct first and then as fast as possible."
)

_ANSWER_ONE = """\
- Reply with the complete kernel file, every turn, in ONE fenced code block tagged cpp (```cpp ... ```).
  It is compiled as kernel.cu with:"""

_ANSWER_SEVERAL = """\
- Reply with the complete kernel source, every turn: ONE fenced code block tagged cpp (```cpp ... ```),
  or one fenced block per file with the file name after the tag (```cpp kernel.h, then ```cpp kernel.cu).
  The entry point lives in kernel.cu; other .cu files are compiled and linked with it, headers are
  included by name (#include "kernel.h"); at most 16 files, names with letters, digits, _ . - and /.
  kernel.cu is compiled with:"""

_RULES = """\
How to answer:
{answer}
  nvcc -O3 -shared -Xcompiler -fPIC -std=c++17 -gencode={gencode} -cudart shared -lineinfo -Xptxas -v -lcuda
  plus the TVM-FFI include and library paths.
- Export the entry point through TVM-FFI: TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, your_function);
  with signature void run({signature}) using tvm::ffi::TensorView for tensors (inputs first, then outputs).
  Outputs are allocated by the harness: write every element, never reallocate, return nothing.
- Launch on the caller's stream: cudaStream_t stream = (cudaStream_t)TVMFFIEnvGetStream(kDLCUDA, device_id)
  from <tvm/ffi/extra/c_env_api.h>. Do not create streams or launch work anywhere else.
- Available headers: cuda_runtime.h, cuda.h (driver API, e.g. cuTensorMapEncodeTiled), cuda_bf16.h,
  cuda_fp16.h, tvm/ffi/*. Forbidden: cuBLAS, cuBLASLt, cuDNN, CUTLASS, CuTe, any dlopen/dlsym, file,
  process or network calls. Do not modify inputs.
- The target instruction family for {arch} is {target}. The kernel counts as a target-instruction
  success only if such instructions actually execute during a checked call and its tensor-core MMAs do
  at least half of the task's FLOPs (counted per SASS instruction while the call runs).
- Correctness: every output element must satisfy |out - ref| <= {atol} or |out - ref| / |ref| <= {rtol},
  on several fresh random inputs; then the kernel is timed against {baseline}.
"""


DEFAULT_VARIANT = "full"
"""The prompt variant of ``gymnasium.make`` and ``ptxgym eval`` when none is named: the whole knowledge
pack, as in the PTXBench paper (about 111k characters for a Hopper task, roughly 37k tokens). Name
``"params"`` (about 7k characters) or ``"none"`` (rules and ABI only, about 3k) for small contexts."""
NO_VARIANT = "none"
"""The variant name that means no knowledge pack (rules and ABI only)."""


def pack_variant(variant: str | None) -> str | None:
    """The pack variant to render: ``None`` and ``"none"`` both mean no pack."""
    return None if variant in (None, NO_VARIANT) else variant


class TaskPrompt(BaseModel):
    """The system message and the first user message of an episode."""

    model_config = ConfigDict(frozen=True)

    system: str
    user: str
    variant: str | None = None

    @property
    def text(self) -> str:
        """Both messages as one text (the env's first observation)."""
        return f"{self.system}\n\n{self.user}"

    def messages(self) -> list[dict[str, str]]:
        """The opening chat messages (system, user). Later turns: ``ptxgym.policies.Conversation``."""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return [*msgs, {"role": "user", "content": self.user}]


_SCALAR_TYPES = {
    "float32": "float",
    "float16": "float",
    "bfloat16": "float",
    "int64": "int64_t",
    "bool": "bool",
}


def entry_signature(task: Task) -> str:
    """The C++ parameter list of ``run`` for a task, e.g. ``TensorView A, TensorView B, TensorView C``.

    A scalar input (shape null) is a plain C++ value (``float sm_scale``, ``int32_t n``).
    """
    specs = [*task.definition.inputs.items(), *task.definition.outputs.items()]
    return ", ".join(
        f"tvm::ffi::TensorView {n}" if s.shape is not None else f"{_SCALAR_TYPES.get(s.dtype, 'int32_t')} {n}"
        for n, s in specs
    )


def task_description(task: Task) -> str:
    """The definition (minus tags) as indented JSON, with the concrete workload sizes."""
    d = task.definition.to_dict()
    d.pop("tags", None)
    sizes = ", ".join(f"{k}={v}" for k, v in task.definition.axis_values(task.workload).items())
    return (
        f"Task: {task.summary}.\nDefinition (FlashInfer-Trace JSON; `reference` is the PyTorch oracle):\n"
        f"```json\n{json.dumps(d, indent=2)}\n```\nWorkload evaluated: {sizes}.\n"
    )


def _pack_text(task: Task, variant: str | None) -> str:
    variant = pack_variant(variant)
    if variant is None:
        return ""
    from ptxgym.knowledge_packs import render_variant  # the packs own their variant names

    return render_variant(task.arch, variant).text


def build_task_prompt(task: Task, variant: str | None = None) -> TaskPrompt:
    """System and first user message for a task and a knowledge-pack variant."""
    arch = task.arch_spec
    system = "\n\n".join(
        part
        for part in (
            _ROLE.format(family=arch.family, arch=arch.name, gpus=", ".join(arch.gpus)),
            _RULES.format(
                answer=_ANSWER_SEVERAL if task.multi_file_prompt else _ANSWER_ONE,
                gencode=arch.gencode,
                signature=entry_signature(task),
                arch=arch.name,
                target=arch.target_family,
                atol=task.tolerance.atol,
                rtol=task.tolerance.rtol,
                baseline=task.baseline.library,
            ),
            _pack_text(task, variant),
        )
        if part
    )
    user = task_description(task) + "\nWrite the kernel."
    return TaskPrompt(system=system, user=user, variant=variant)
