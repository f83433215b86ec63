"""The trusted evaluator's buffers for one task: input sets, outputs, reference outputs, perturbations.

Everything a candidate's worker may touch lives in one device allocation (the *blob*), shared with the
worker through CUDA IPC: the input sets and their output buffers. Everything that decides a verdict
stays private to the trusted process: the pristine inputs of each set, the reference outputs, and the
sign state of its perturbations (the shared inputs must equal pristine x state after every call). The
blob is one allocation sized to a whole number of 2 MiB pages above the caching allocator's large-segment
bound, so no private tensor can share the IPC-mapped segment.

Sets are generated once per arena (seeds recorded) and their fp32 references computed once; each call
then perturbs the set in place by exact sign flips (``perturb.py``), so the candidate sees new values
at the same addresses and the expected output is known without re-running the reference.
"""

from __future__ import annotations

import io
import pickle
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxgym.evaluation.compare import SetCheck, check_call, poison_
from ptxgym.evaluation.protocol import Arg, Attach, ScalarArg, TensorArg
from ptxgym.evaluation.trusted.inputs import (
    generate_inputs,
    load_reference,
    reference_options,
    run_reference,
    torch_dtype,
)
from ptxgym.evaluation.trusted.perturb import SignPerturbation
from ptxgym.records.tasks import Task

_ALIGN = 256
_PAGE = 2 << 20
_MIN_BLOB = 12 << 20


@dataclass
class InputSet:
    """One input set: shared buffers, the trusted copies, the reference, the perturbation state."""

    seed: int
    shared_in: dict[str, Any]
    shared_out: dict[str, Any]
    base_in: dict[str, Any]
    """Private pristine inputs; the shared ones must equal them with ``state`` applied."""
    reference: dict[str, Any]
    state: list = field(default_factory=list)


def ipc_pickle(obj: Any) -> bytes:
    """Pickle with torch's reducers, so CUDA tensors travel as IPC handles."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers the CUDA tensor reducers

    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


class Arena:
    """Input sets, outputs and references of one task on one device."""

    def __init__(self, task: Task, seeds: list[int], device: int, scratch: Path) -> None:
        import torch

        self.task = task
        self.id = f"{task.id}-{uuid.uuid4().hex[:8]}"
        self.device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        self.scratch = scratch
        self.namespace = load_reference(task)
        self.options = reference_options(task, self.namespace)
        self.perturb = SignPerturbation(task.definition, task.definition.axis_values(task.workload))
        self.shapes = task.shapes()
        self._layout: list[list[Arg]] = []
        self.blob = self._allocate(len(seeds))
        self.sets = [self._make_set(i, seed) for i, seed in enumerate(seeds)]
        self._inputs_file: Path | None = None

    # ------------------------------------------------------------------------------------ building

    def _tensor_names(self) -> list[tuple[str, str]]:
        defn = self.task.definition
        roles = [("in", n) for n, s in defn.inputs.items() if s.shape is not None]
        return roles + [("out", n) for n in defn.outputs]

    def _nbytes(self, name: str) -> int:
        import torch

        spec = self.task.definition.inputs.get(name) or self.task.definition.outputs[name]
        n = 1
        for d in self.shapes[name]:
            n *= d
        return n * torch.empty((), dtype=torch_dtype(spec.dtype)).element_size()

    def _allocate(self, n_sets: int):
        import torch

        offset = 0
        self._offsets: list[dict[str, int]] = []
        for _ in range(n_sets):
            offsets = {}
            for _, name in self._tensor_names():
                offsets[name] = offset
                offset += -(-self._nbytes(name) // _ALIGN) * _ALIGN
            self._offsets.append(offsets)
        total = max(_MIN_BLOB, -(-offset // _PAGE) * _PAGE)
        return torch.empty(total, dtype=torch.uint8, device=self.device)

    def _view(self, offset: int, name: str):
        spec = self.task.definition.inputs.get(name) or self.task.definition.outputs[name]
        dtype = torch_dtype(spec.dtype)
        return self.blob[offset : offset + self._nbytes(name)].view(dtype).view(self.shapes[name])

    def _make_set(self, index: int, seed: int) -> InputSet:
        defn = self.task.definition
        offsets = self._offsets[index]
        values = generate_inputs(self.task, self.namespace, seed, self.device)
        shared_in, base_in = {}, {}
        entry: list[Arg] = []
        for name in defn.inputs:
            value = values[name]
            if not hasattr(value, "shape"):
                entry.append(ScalarArg(value=value))
                continue
            view = self._view(offsets[name], name)
            view.copy_(value)
            shared_in[name] = view
            base_in[name] = value
            dtype = str(value.dtype).removeprefix("torch.")
            entry.append(TensorArg(role="in", offset=offsets[name], shape=self.shapes[name], dtype=dtype))
        del values
        reference = run_reference(self.task, self.namespace, base_in)
        shared_out = {}
        for name, spec in defn.outputs.items():
            shared_out[name] = self._view(offsets[name], name)
            poison_(shared_out[name])
            entry.append(
                TensorArg(role="out", offset=offsets[name], shape=self.shapes[name], dtype=spec.dtype)
            )
        self._layout.append(entry)
        return InputSet(
            seed=seed,
            shared_in=shared_in,
            shared_out=shared_out,
            base_in=base_in,
            reference=reference,
            state=self.perturb.identity(self.device),
        )

    # ------------------------------------------------------------------------------------- per call

    def attach_command(self, flush_bytes: int, cupti: bool) -> Attach:
        """The command that maps this arena into a worker."""
        return Attach(arena=self.id, blob=self.blob, sets=self._layout, flush_bytes=flush_bytes, cupti=cupti)

    def prepare(self, index: int, generator, perturb: bool = True) -> None:
        """Perturb set ``index`` in place (new values, same addresses) and poison its outputs."""
        s = self.sets[index]
        if perturb and self.perturb.active:
            signs = self.perturb.draw(generator, self.device)
            self.perturb.apply_inputs({n: s.shared_in[n] for n in self.perturb.changed_inputs}, signs)
            s.state = self.perturb.compose(s.state, signs)
        for out in s.shared_out.values():
            poison_(out)

    def expected_inputs(self, index: int) -> dict[str, Any]:
        """What the shared inputs of set ``index`` must hold now."""
        s = self.sets[index]
        return self.perturb.expected_inputs(s.base_in, s.state)

    def verify(self, index: int) -> SetCheck:
        """Inputs of set ``index`` intact and its outputs equal to the (perturbed) reference."""
        s = self.sets[index]
        expected = self.perturb.expected(s.reference, s.state)
        return check_call(
            s.shared_out, expected, s.shared_in, self.expected_inputs(index), self.task.tolerance
        )

    def _damaged(self):
        """(shared tensor, what it must hold, input name) for every input of any set that differs."""
        import torch

        for i, s in enumerate(self.sets):
            want = self.expected_inputs(i)
            for n, t in s.shared_in.items():
                if not torch.equal(t, want[n]):
                    yield t, want[n], n

    def mutated_inputs(self) -> list[str]:
        """Names of inputs (in any set) that differ from what they must hold."""
        return sorted({n for _, _, n in self._damaged()})

    def restore(self) -> list[str]:
        """Rewrite every shared input that differs from what it must hold; return the names rewritten.

        A candidate that writes to its inputs gets INPUT_MUTATED, but the buffers it wrote are shared with
        every later worker of this arena: without this, the next candidates would inherit the damage (and
        be judged INPUT_MUTATED or compared against a reference of other inputs). Called before each
        worker session; costs one comparison pass over the inputs when nothing was touched.
        """
        import torch

        fixed = set()
        for tensor, want, name in list(self._damaged()):
            tensor.copy_(want)
            fixed.add(name)
        if fixed and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return sorted(fixed)

    @property
    def seeds(self) -> list[int]:
        """Seeds of the input sets."""
        return [s.seed for s in self.sets]

    def inputs_file(self) -> Path:
        """The first set's current input values saved for one-shot driver processes (ncu, memcheck)."""
        import torch

        if self._inputs_file is None:
            path = self.scratch / f"{self.id}-inputs.pt"
            want = self.expected_inputs(0)
            torch.save(
                {
                    "inputs": {n: t.cpu() for n, t in want.items()},
                    "order": [n for n in self.task.definition.inputs if n in want],
                    "outputs": {
                        n: (list(self.shapes[n]), spec.dtype)
                        for n, spec in self.task.definition.outputs.items()
                    },
                },
                path,
            )
            self._inputs_file = path
        return self._inputs_file

    def close(self) -> None:
        """Drop the saved inputs file (GPU memory goes with the object)."""
        if self._inputs_file is not None:
            self._inputs_file.unlink(missing_ok=True)
