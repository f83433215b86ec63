"""A small, safe expression language for the FLOP and byte counts of a task (data, never ``eval``).

A formula is one arithmetic expression over the axis values of a workload and the workload's
``params`` (``"2 * M * N * K"``, ``"4 * H * D * sum(q_lens * (q_lens + 1) / 2)"``). It is parsed with
Python's ``ast`` module and then *interpreted* node by node; only these constructs exist:

* numbers (int or float literals) and names (an axis or a workload param);
* ``+ - * / // % **`` and unary ``-``/``+``, with parentheses;
* the functions ``sum(list)``, ``min(...)``, ``max(...)``, ``ceil(x)``, ``floor(x)`` and
  ``cdiv(a, b)`` (ceiling division).

A name bound to a list (a workload param such as the sequence lengths of a ragged batch) makes the
arithmetic element-wise, as in numpy: ``q_lens * 2`` is a list, ``sum(q_lens * 2)`` a number. The value
of a whole formula must be a finite, non-negative number. Attribute access, subscripts, calls of any
other function, comparisons, lambdas, comprehensions and names not bound by the workload are errors
(``FormulaError``, which says what was found and where). Exponents are bounded (``|p| <= 8``) and lists
are bounded in length, so a formula cannot make the interpreter work for long.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from functools import cache

from ptxgym.records.errors import SchemaError

Value = float | list[float]
MAX_CHARS = 400
MAX_POWER = 8
MAX_LIST = 1 << 20

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_SYMBOL = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
FUNCTIONS = ("sum", "min", "max", "ceil", "floor", "cdiv")


class FormulaError(SchemaError):
    """A formula that does not parse, uses something outside the language, or has no valid value."""


@cache
def parse_formula(text: str) -> ast.Expression:
    """Parse and check a formula's syntax (names are checked when it is evaluated)."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError("a formula must be a non-empty expression, e.g. '2 * M * N * K'")
    if len(text) > MAX_CHARS:
        raise FormulaError(f"formula is {len(text)} characters, over the limit of {MAX_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"formula {text!r} does not parse: {exc.msg}") from exc
    for node in ast.walk(tree):
        _check_node(node, text)
    return tree


def _check_node(node: ast.AST, text: str) -> None:
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load)
    allowed_ops = (*_BINARY, ast.USub, ast.UAdd)
    if isinstance(node, allowed_ops):
        return
    if not isinstance(node, allowed):
        raise FormulaError(
            f"formula {text!r} uses {type(node).__name__}, which the formula language does not have "
            "(numbers, names, + - * / // % **, parentheses and " + ", ".join(FUNCTIONS) + " only)"
        )
    if isinstance(node, ast.Constant) and (
        isinstance(node.value, bool) or not isinstance(node.value, int | float)
    ):
        raise FormulaError(f"formula {text!r}: only number literals are allowed, found {node.value!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise FormulaError(
                f"formula {text!r} calls {ast.unparse(node.func)}(); only {', '.join(FUNCTIONS)} exist"
            )


def formula_names(text: str) -> set[str]:
    """The names a formula uses (functions excluded)."""
    tree = parse_formula(text)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate_formula(text: str, names: Mapping[str, float | int | Sequence[float | int]]) -> float:
    """The value of a formula with the given names bound; a finite number >= 0, else FormulaError."""
    tree = parse_formula(text)
    value = _Interpreter(text, names).visit(tree.body)
    if isinstance(value, list):
        raise FormulaError(f"formula {text!r} gives a list; reduce it with sum(), min() or max()")
    if not math.isfinite(value) or value < 0:
        raise FormulaError(f"formula {text!r} gives {value}; a count must be finite and >= 0")
    return float(value)


class _Interpreter:
    def __init__(self, text: str, names: Mapping[str, float | int | Sequence[float | int]]) -> None:
        self.text = text
        self.names = names

    def fail(self, message: str) -> FormulaError:
        return FormulaError(f"formula {self.text!r}: {message}")

    def visit(self, node: ast.AST) -> Value:
        if isinstance(node, ast.Constant):
            literal = node.value
            if not isinstance(literal, int | float):  # parse_formula admits numbers only
                raise self.fail(f"unexpected literal {literal!r}")
            return float(literal)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.UnaryOp):
            value = self.visit(node.operand)
            sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
            return [sign * v for v in value] if isinstance(value, list) else sign * value
        if isinstance(node, ast.BinOp):
            return self._binary(node)
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)  # checked by parse_formula
            return self._call(node.func.id, [self.visit(a) for a in node.args])
        raise self.fail(f"unexpected {type(node).__name__}")  # unreachable after parse_formula

    def _name(self, name: str) -> Value:
        if name not in self.names:
            raise self.fail(f"unknown name {name!r}; known: {', '.join(sorted(self.names)) or 'none'}")
        value = self.names[name]
        if isinstance(value, bool):
            raise self.fail(f"{name!r} is a boolean, not a number")
        if isinstance(value, int | float):
            return float(value)
        items = list(value)
        if len(items) > MAX_LIST or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in items
        ):
            raise self.fail(f"{name!r} must be a number or a list of at most {MAX_LIST} numbers")
        return [float(v) for v in items]

    def _binary(self, node: ast.BinOp) -> Value:
        left, right = self.visit(node.left), self.visit(node.right)
        fn = _BINARY[type(node.op)]
        if isinstance(node.op, ast.Pow):
            exps = right if isinstance(right, list) else [right]
            if any(abs(e) > MAX_POWER for e in exps):
                raise self.fail(f"exponent above {MAX_POWER}")
        symbol = _SYMBOL[type(node.op)]
        if isinstance(left, list) and isinstance(right, list):
            if len(left) != len(right):
                raise self.fail(f"lists of lengths {len(left)} and {len(right)} combined with {symbol}")
            return [self._apply(fn, a, b, symbol) for a, b in zip(left, right, strict=True)]
        if isinstance(left, list):
            return [self._apply(fn, a, right, symbol) for a in left]  # type: ignore[arg-type]
        if isinstance(right, list):
            return [self._apply(fn, left, b, symbol) for b in right]
        return self._apply(fn, left, right, symbol)

    def _apply(self, fn: Callable[[float, float], float], a: float, b: float, symbol: str) -> float:
        try:
            return float(fn(a, b))
        except (ZeroDivisionError, OverflowError) as exc:
            raise self.fail(f"{a} {symbol} {b}: {exc}") from exc

    def _call(self, name: str, args: list[Value]) -> Value:
        if name == "sum":
            if len(args) != 1 or not isinstance(args[0], list):
                raise self.fail("sum() takes one list")
            return float(math.fsum(args[0]))
        if name in ("min", "max"):
            flat = args[0] if len(args) == 1 and isinstance(args[0], list) else args
            numbers = [a for a in flat if not isinstance(a, list)]
            if not numbers or len(numbers) != len(flat):
                raise self.fail(f"{name}() takes one non-empty list or several numbers")
            return float(min(numbers) if name == "min" else max(numbers))
        if name in ("ceil", "floor"):
            if len(args) != 1:
                raise self.fail(f"{name}() takes one argument")
            fn = math.ceil if name == "ceil" else math.floor
            arg = args[0]
            return [float(fn(v)) for v in arg] if isinstance(arg, list) else float(fn(arg))
        if len(args) != 2:  # cdiv
            raise self.fail("cdiv() takes two arguments")
        return self._binary_values(args[0], args[1])

    def _binary_values(self, a: Value, b: Value) -> Value:
        def cdiv(x: float, y: float) -> float:
            return -(-x // y)

        if isinstance(a, list) or isinstance(b, list):
            xs = a if isinstance(a, list) else [a] * len(b)  # type: ignore[arg-type]
            ys = b if isinstance(b, list) else [b] * len(xs)
            if len(xs) != len(ys):
                raise self.fail("cdiv() of lists of different lengths")
            return [self._apply(cdiv, x, y, "cdiv") for x, y in zip(xs, ys, strict=True)]
        return self._apply(cdiv, a, b, "cdiv")
