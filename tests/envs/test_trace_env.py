"""ptxgym/Trace-v0 plays a FlashInfer-Trace folder; reset draws workloads; a secret seed per episode.

The fixture ``tests/fixtures/trace_dataset`` is our own: an fp16 GEMM definition with a variable M, three
workloads and a two-file solution (``gemm_tile.h`` + ``kernel.cu``) whose entry point is
``kernel.cu::gemm_fixture``.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import pytest

import ptxgym  # noqa: F401 - registers the ids
from ptxgym.evaluation.trusted.base import BuiltCandidate, GpuVerdict, NullEvaluator
from ptxgym.knowledge_packs.prompting import build_task_prompt
from ptxgym.records.feedback import Stage, Status
from ptxgym.records.schema import Solution
from ptxgym.records.tasks import Task, get_task

FIXTURE = Path(__file__).parents[1] / "fixtures" / "trace_dataset"
SOLUTION = FIXTURE / "solutions" / "fixture" / "gemm" / "gemm_n256_k512" / "naive_two_files.json"
TASK = "gemm_n256_k512@sm_90a"


class Recording(NullEvaluator):
    """NullEvaluator that keeps what the pipeline handed it (task and candidate)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Task, BuiltCandidate]] = []

    def evaluate(self, task: Task, candidate: BuiltCandidate) -> GpuVerdict:
        self.seen.append((task, candidate))
        return super().evaluate(task, candidate)


def trace_env(**kw):
    return gymnasium.make("ptxgym/Trace-v0", dataset=FIXTURE, task=TASK, variant=None, **kw)


def test_trace_env_needs_a_task() -> None:
    with pytest.raises(ValueError, match="no task given"):
        gymnasium.make("ptxgym/Trace-v0", dataset=FIXTURE, evaluator="none")


def test_trace_prompt_documents_several_files_and_the_drawn_workload() -> None:
    env = trace_env(evaluator="none")
    obs, info = env.reset(seed=3, options={"workload": {"M": 1000}})
    assert info["task_id"] == TASK and info["workload"] == {"uuid": "fixture-m1000", "axes": {"M": 1000}}
    assert (
        "one fenced block per file" in obs["text"]
        and "Workload evaluated: M=1000, N=256, K=512" in obs["text"]
    )
    assert '"dtype": "float16"' in obs["text"]


def test_reset_draws_workloads_of_the_family_reproducibly() -> None:
    env = gymnasium.make("ptxgym/Gemm4096x4096-sm90a-v0", evaluator="none", variant=None)
    drawn = {s: env.reset(seed=s)[1]["workload"]["axes"]["M"] for s in range(16)}
    assert set(drawn.values()) <= {128, 400, 1024, 3000, 8192} and len(set(drawn.values())) >= 3
    assert all(env.reset(seed=s)[1]["workload"]["axes"]["M"] == m for s, m in drawn.items())
    _, info = env.reset(seed=0, options={"workload": "default"})
    assert info["workload"]["axes"] == {"M": 8192}
    obs, info = env.reset(options={"workload": 2})
    assert info["workload"]["axes"] == {"M": 400} and "Workload evaluated: M=400," in obs["text"]
    assert env.unwrapped.task.flops == 2.0 * 400 * 4096 * 4096
    with pytest.raises(ValueError, match="no workload of Gemm4096x4096-sm90a with axes"):
        env.reset(options={"workload": {"M": 7}})


def test_single_workload_tasks_never_change() -> None:
    env = gymnasium.make("ptxgym/Gemm-sm90a-v0", evaluator="none", variant=None)
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        assert info["workload"]["axes"] == {"M": 8192}
        assert obs["text"] == build_task_prompt(get_task("Gemm-sm90a"), None).text


def test_each_episode_draws_a_secret_input_seed() -> None:
    env = trace_env(evaluator="none")
    seeds = []
    for _ in range(3):
        obs, info = env.reset(seed=0)  # the same reset seed: the input seed must still differ
        seed = env.unwrapped._input_seed
        assert isinstance(seed, int) and str(seed) not in obs["text"] and seed not in info.values()
        seeds.append(seed)
    assert len(set(seeds)) == 3


def test_a_solution_of_another_definition_is_task_mismatch() -> None:
    env = gymnasium.make("ptxgym/Gemm-sm90a-v0", evaluator="none", variant=None)
    env.reset(seed=0)
    sol = Solution.from_json(SOLUTION.read_text())
    _, _, _, _, info = env.step(sol)
    fb = info["feedback"]
    assert fb.status is Status.TASK_MISMATCH and fb.stage is Stage.EXTRACT and fb.compile is None
    assert "written for definition 'gemm_n256_k512'" in fb.message
    assert fb.workload is not None and fb.workload.axes == {"M": 8192}
    assert type(fb).from_json(fb.to_json()).workload == fb.workload
    assert not fb.status.compiled


@pytest.mark.nvcc
def test_fixture_solution_plays_through_env_step_to_the_build_stage() -> None:
    ev = Recording()
    env = trace_env(evaluator=ev)
    env.reset(seed=0, options={"workload": {"M": 256}})
    _, _, _, _, info = env.step(Solution.from_json(SOLUTION.read_text()))
    fb = info["feedback"]
    assert fb.status is Status.NOT_EVALUATED, fb.message
    assert fb.compile.ok and fb.sass is not None
    assert fb.workload is not None and fb.workload.axes == {"M": 256}  # the verdict names its workload
    ((task, cand),) = ev.seen
    assert fb.workload.uuid == task.workload.uuid
    assert cand.entry_symbol == "gemm_fixture"  # the solution's own entry point, honoured
    assert task.workload.axes == {"M": 256} and task.id == TASK
    assert cand.input_seed == env.unwrapped._input_seed  # the episode's secret seed reaches the evaluator


@pytest.mark.nvcc
@pytest.mark.slow  # ~6.5 s of nvcc
def test_two_named_blocks_play_as_two_files() -> None:
    files = {s["path"]: s["content"] for s in json.loads(SOLUTION.read_text())["sources"]}
    kernel = files["kernel.cu"].replace(
        "TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_fixture,", "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run,"
    )
    action = (
        f"Header first.\n```cpp gemm_tile.h\n{files['gemm_tile.h']}```\n\n```cuda kernel.cu\n{kernel}```\n"
    )
    ev = Recording()
    env = trace_env(evaluator=ev)
    env.reset(seed=1)
    _, _, _, _, info = env.step(action)
    fb = info["feedback"]
    assert fb.status is Status.NOT_EVALUATED, fb.message
    assert ev.seen[0][1].entry_symbol == "run"
    # without the header the same kernel.cu does not build: the second file really was used
    _, _, _, _, info = env.step(f"```cuda kernel.cu\n{kernel}```")
    assert info["feedback"].status is Status.COMPILE_ERROR
