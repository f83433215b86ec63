"""The server commands ``ptxgym serve`` builds (vLLM and SGLang cannot run here: the argv is tested)."""

from __future__ import annotations

import shlex

import pytest

from ptxgym.cli.main import main
from ptxgym.policies.serve import ServeSpec, reasoning_parser_for, serve_command


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_vllm_command_with_qwen3_reasoning_lora_and_tp() -> None:
    spec = ServeSpec(
        engine="vllm",
        model="Qwen/Qwen3-8B",
        port=8123,
        tp=2,
        max_model_len=131072,
        loras={"fixit": "/ad/fixit", "kgen": "/ad/kgen"},
        max_lora_rank=32,
        max_loras=2,
    )
    cmd = serve_command(spec)
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    assert _flag(cmd, "--port") == "8123" and _flag(cmd, "--host") == "127.0.0.1"
    assert _flag(cmd, "--tensor-parallel-size") == "2" and _flag(cmd, "--max-model-len") == "131072"
    assert _flag(cmd, "--reasoning-parser") == "qwen3"
    i = cmd.index("--lora-modules")
    assert "--enable-lora" in cmd and cmd[i + 1 : i + 3] == ["fixit=/ad/fixit", "kgen=/ad/kgen"]
    assert _flag(cmd, "--max-lora-rank") == "32" and _flag(cmd, "--max-loras") == "2"
    assert spec.base_url == "http://127.0.0.1:8123/v1"


def test_sglang_command_uses_its_own_flag_names() -> None:
    spec = ServeSpec(
        engine="sglang",
        model="/models/Qwen3-32B",
        tp=4,
        max_model_len=65536,
        gpu_memory=0.85,
        loras={"fixit": "/ad/fixit"},
        max_lora_rank=64,
        max_loras=4,
    )
    cmd = serve_command(spec, python="python3")
    assert cmd[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-32B"]
    assert _flag(cmd, "--port") == "30000" and _flag(cmd, "--tp-size") == "4"
    assert _flag(cmd, "--context-length") == "65536" and _flag(cmd, "--mem-fraction-static") == "0.85"
    assert _flag(cmd, "--reasoning-parser") == "qwen3"
    assert "--enable-lora" in cmd and _flag(cmd, "--lora-paths") == "fixit=/ad/fixit"
    assert _flag(cmd, "--max-loras-per-batch") == "4"
    assert "--tensor-parallel-size" not in cmd and "--max-model-len" not in cmd


def test_reasoning_parser_from_model_name() -> None:
    assert reasoning_parser_for("Qwen/Qwen3.6-27B", "vllm") == "qwen3"
    assert reasoning_parser_for("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "vllm") == "deepseek_r1"
    assert reasoning_parser_for("deepseek-ai/DeepSeek-R1", "sglang") == "deepseek-r1"
    assert reasoning_parser_for("meta-llama/Llama-3.1-8B-Instruct", "vllm") is None
    cmd = serve_command(ServeSpec(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct"))
    assert (
        "--reasoning-parser" not in cmd and "--enable-lora" not in cmd and "--tensor-parallel-size" not in cmd
    )


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="max-lora-rank"):
        serve_command(ServeSpec(engine="vllm", model="m", loras={"a": "/p"}, max_lora_rank=24))
    with pytest.raises(ValueError, match="adapter name"):
        serve_command(ServeSpec(engine="sglang", model="m", loras={"a:b": "/p"}))
    with pytest.raises(ValueError, match="engine"):
        serve_command(ServeSpec(engine="tgi", model="m"))


def test_cli_dry_run_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "serve",
            "--engine",
            "vllm",
            "--model",
            "Qwen/Qwen3-8B",
            "--port",
            "8001",
            "--lora",
            "fixit=/ad/fixit",
            "--max-model-len",
            "131072",
            "--dry-run",
            "--",
            "--enforce-eager",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    cmd = shlex.split(out.strip())
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"] and cmd[-1] == "--enforce-eager"
    assert "--lora-modules" in cmd and "--base-url http://127.0.0.1:8001/v1" in err


def test_cli_without_the_engine_installed_says_what_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    from ptxgym.policies.serve import engine_missing

    if engine_missing("sglang") is None:
        pytest.skip("SGLang is installed here")
    rc = main(["serve", "--engine", "sglang", "--model", "Qwen/Qwen3-8B"])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'ptxgym[sglang]'" in err and "sglang.launch_server" in err
