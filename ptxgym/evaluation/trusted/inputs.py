"""Input generation and the reference oracle, in the trusted process.

Inputs of a workload are made from a recorded seed: ``random`` floats are standard normal drawn directly
in the tensor's dtype (never zeros), ``derived`` inputs come from the named function of the definition's
reference source (e.g. ``forward_state`` gives the O and LSE an attention backward consumes; ``layout``
gives the index arrays of a ragged or paged batch from the workload's ``params``: such functions also
receive the axis values and params they name; what they return is placed on the device), scalars
are passed as is. The reference ``run`` and the derived-input functions run in fp32-exact matmul mode,
except that a matmul of two operands exact in TF32 (bf16 or fp16 values converted to fp32) runs on TF32
tensor cores, which changes only its accumulation order (``precision.py``). The reference's outputs are
checked against the definition's shapes and dtypes before anything is compared with them.
"""

from __future__ import annotations

import inspect
from typing import Any

from ptxgym.evaluation.trusted.precision import reference_precision
from ptxgym.records.errors import InfraError
from ptxgym.records.schema import DerivedInput, RandomInput, SafetensorsInput, ScalarInput
from ptxgym.records.tasks import Task


def torch_dtype(name: str):
    """The torch dtype of a FlashInfer-Trace dtype name."""
    import torch

    mapping = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    if name in mapping:
        return mapping[name]
    value = getattr(torch, name, None)
    if value is None:
        raise InfraError(f"dtype {name!r} has no torch equivalent in this torch build")
    return value


def load_reference(task: Task) -> dict[str, Any]:
    """Execute the definition's reference source (catalog code, trusted) and return its namespace."""
    namespace: dict[str, Any] = {"__name__": f"ptxgym_reference_{task.definition.name}"}
    try:
        exec(compile(task.definition.reference, f"<reference {task.definition.name}>", "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - a broken catalog entry is an infrastructure fault
        raise InfraError(f"the reference of {task.definition.name} does not execute: {exc!r}") from exc
    return namespace


def reference_options(task: Task, namespace: dict[str, Any]) -> dict[str, Any]:
    """Keyword defaults of the reference ``run`` that are not inputs (e.g. ``causal=True``)."""
    params = inspect.signature(namespace["run"]).parameters
    return {
        name: p.default
        for name, p in params.items()
        if name not in task.definition.inputs and p.default is not inspect.Parameter.empty
    }


def generate_inputs(task: Task, namespace: dict[str, Any], seed: int, device) -> dict[str, Any]:
    """All inputs of one set, in definition order, drawn from ``seed``."""
    import torch

    defn, wl = task.definition, task.workload
    gen = torch.Generator(device=device).manual_seed(seed)
    shapes = task.shapes()
    values: dict[str, Any] = {}
    derived: dict[str, str] = {}
    for name, spec in defn.inputs.items():
        how = wl.inputs.get(name, RandomInput())
        dtype = torch_dtype(spec.dtype)
        if isinstance(how, RandomInput):
            values[name] = _random(shapes[name], dtype, gen, device)
        elif isinstance(how, ScalarInput):
            values[name] = how.value
        elif isinstance(how, DerivedInput):
            derived[name] = how.function
        elif isinstance(how, SafetensorsInput):
            raise InfraError(
                f"input {name} of {defn.name} comes from a safetensors file, which the local "
                "evaluator does not load yet; use random or derived inputs"
            )
    for function in dict.fromkeys(derived.values()):
        produced = _call_derived(task, namespace, function, values)
        for name, fn_name in derived.items():
            if fn_name == function:
                values[name] = _checked(task, name, produced, function).to(device)
    return {name: values[name] for name in defn.inputs}


def fresh_names(task: Task, namespace: dict[str, Any]) -> tuple[str, ...]:
    """Inputs a timed call redraws: random tensors that no derived input is computed from.

    A redrawn input that feeds a derived one (the attention backward's Q, K, V feed O and LSE through
    ``forward_state``) would need the derived function run again on every timed call, a reference forward
    each time; those keep their set's values, and the inputs drawn beside them (dO) carry the change.
    """
    defn, wl = task.definition, task.workload
    feeding: set[str] = set()
    for how in wl.inputs.values():
        if isinstance(how, DerivedInput) and callable(namespace.get(how.function)):
            feeding.update(inspect.signature(namespace[how.function]).parameters)
    return tuple(
        name
        for name, spec in defn.inputs.items()
        if spec.shape is not None
        and isinstance(wl.inputs.get(name, RandomInput()), RandomInput)
        and name not in feeding
    )


def draw_fresh(task: Task, names: tuple[str, ...], generator, device) -> dict[str, Any]:
    """New values of ``names`` from the workload's distribution (the same draw as ``generate_inputs``)."""
    shapes = task.shapes()
    return {
        name: _random(shapes[name], torch_dtype(task.definition.inputs[name].dtype), generator, device)
        for name in names
    }


def _random(shape: tuple[int, ...], dtype, gen, device):
    import torch

    if dtype.is_floating_point:
        if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
        return torch.randn(shape, generator=gen, device=device, dtype=dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen, device=device).bool()
    return torch.randint(1, 64, shape, generator=gen, device=device, dtype=dtype)


def _call_derived(task: Task, namespace: dict[str, Any], function: str, values: dict[str, Any]) -> dict:
    fn = namespace.get(function)
    if not callable(fn):
        raise InfraError(
            f"workload of {task.definition.name} derives inputs from {function!r}, which its "
            "reference does not define"
        )
    params = inspect.signature(fn).parameters
    kwargs = {n: values[n] for n in params if n in values}
    named = {**task.definition.axis_values(task.workload), **(task.workload.params or {})}
    kwargs.update({n: v for n, v in named.items() if n in params and n not in kwargs})
    try:
        with reference_precision():
            produced = fn(**kwargs)
    except Exception as exc:  # noqa: BLE001 - a broken catalog entry is an infrastructure fault
        raise InfraError(
            f"derived-input function {function} of {task.definition.name} failed: {exc!r}"
        ) from exc
    if not isinstance(produced, dict):
        raise InfraError(
            f"derived-input function {function} of {task.definition.name} must return a dict of "
            f"tensors, returned {type(produced).__name__}"
        )
    return produced


def _checked(task: Task, name: str, produced: dict, origin: str):
    if name not in produced:
        raise InfraError(f"{origin} of {task.definition.name} returned {sorted(produced)}, not {name}")
    return _check_tensor(task, name, produced[name], origin)


def _check_tensor(
    task: Task, name: str, tensor, origin: str, shapes: dict[str, tuple[int, ...]] | None = None
):
    spec = task.definition.inputs.get(name) or task.definition.outputs[name]
    want_shape, want_dtype = (shapes or task.shapes())[name], torch_dtype(spec.dtype)
    if tuple(tensor.shape) != want_shape or tensor.dtype != want_dtype:
        raise InfraError(
            f"{origin} of {task.definition.name} produced {name} as {tuple(tensor.shape)} "
            f"{tensor.dtype}; the definition says {want_shape} {want_dtype}"
        )
    return tensor.contiguous()


def run_reference(
    task: Task,
    namespace: dict[str, Any],
    inputs: dict[str, Any],
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, Any]:
    """Reference outputs for one input set, checked against the definition.

    ``shapes``: the outputs' shapes where the inputs are a cut of a set (``sampled.cut_shapes``).
    """
    try:
        with reference_precision():
            result = namespace["run"](*inputs.values())
    except Exception as exc:  # noqa: BLE001 - a broken catalog entry is an infrastructure fault
        raise InfraError(f"the reference run of {task.definition.name} failed: {exc!r}") from exc
    names = list(task.definition.outputs)
    if not isinstance(result, tuple | list):
        result = (result,)
    if len(result) != len(names):
        raise InfraError(
            f"the reference of {task.definition.name} returned {len(result)} values for outputs {names}"
        )
    return {n: _check_tensor(task, n, t, "reference run", shapes) for n, t in zip(names, result, strict=True)}
