"""The formula language of task records: arithmetic over axis values and workload params, never eval."""

from __future__ import annotations

import pytest

from ptxgym.records.formula import FormulaError, evaluate_formula, formula_names, parse_formula


@pytest.mark.parametrize(
    ("text", "names", "want"),
    [
        ("2 * M * N * K", {"M": 8192, "N": 7168, "K": 5120}, 2.0 * 8192 * 7168 * 5120),
        ("4 * B * H * S ** 2 * D", {"B": 4, "H": 48, "S": 4096, "D": 128}, 4.0 * 4 * 48 * 4096**2 * 128),
        ("(M + 1) // 2 - M % 3", {"M": 10}, 5 - 1),
        ("-x + +y", {"x": 2, "y": 5}, 3),
        ("cdiv(M, 128) * 128", {"M": 400}, 512),
        ("ceil(M / 3) + floor(M / 3)", {"M": 10}, 4 + 3),
        ("sum(q * (kv - q) + q * (q + 1) / 2)", {"q": [3, 1], "kv": [5, 1]}, 3 * 2 + 6 + 0 + 1),
        ("max(L) - min(L) + max(2, 7)", {"L": [4, 9, 1]}, 8 + 7),
        ("sum(cdiv(L, 4))", {"L": [1, 4, 5]}, 1 + 1 + 2),
        ("1.5e3", {}, 1500.0),
    ],
)
def test_values(text: str, names: dict, want: float) -> None:
    assert evaluate_formula(text, names) == pytest.approx(want)


@pytest.mark.parametrize(
    ("text", "names", "needle"),
    [
        ("M.__class__", {"M": 1}, "Attribute"),
        ("__import__('os').system('true')", {}, "calls __import__"),
        ("eval('1')", {}, "calls eval"),
        ("L[0]", {"L": [1]}, "Subscript"),
        ("M > 1", {"M": 2}, "Compare"),
        ("(lambda: 1)()", {}, "calls lambda"),
        ("sum(x for x in L)", {"L": [1]}, "GeneratorExp"),
        ("'a' * 3", {}, "only number literals"),
        ("True + 1", {}, "only number literals"),
        ("sum(L, start=1)", {"L": [1]}, "calls sum"),
        ("Q * 2", {"M": 1}, "unknown name 'Q'"),
        ("L * 2", {"L": [1, 2]}, "gives a list"),
        ("M - 10", {"M": 1}, "finite and >= 0"),
        ("M / 0", {"M": 1}, "division by zero"),
        ("2 ** 100", {}, "exponent above"),
        ("a * b", {"a": [1, 2], "b": [1, 2, 3]}, "lengths 2 and 3"),
        ("", {}, "non-empty"),
        ("M +", {"M": 1}, "does not parse"),
        ("M" + " + M" * 200, {"M": 1}, "over the limit"),
        ("min()", {}, "min() takes"),
        ("sum(M)", {"M": 3}, "sum() takes one list"),
    ],
)
def test_rejected(text: str, names: dict, needle: str) -> None:
    with pytest.raises(FormulaError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        evaluate_formula(text, names)


def test_names_and_parse_cache() -> None:
    assert formula_names("2 * M * sum(q_lens) + cdiv(N, 8)") == {"M", "q_lens", "N"}
    assert parse_formula("2 * M") is parse_formula("2 * M")
