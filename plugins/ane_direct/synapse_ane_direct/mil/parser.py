"""Parse the subset of MIL text the generator writes into statements.

The grammar is MIL's (as Core ML prints it): a ``program(version)`` header, an
optional attribute line, one ``func main<target>(inputs) { ... } -> (outputs);``
whose body is ``type name (, type name)* = op(arg = name, ...)[name = ..., val
= literal];`` statements. Anything outside that subset is a
:class:`MilSyntaxError` naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs

from .program import DType

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<number>[-+]?0x[0-9a-fA-F.]+p[-+]?\d+|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
    | (?P<arrow>->)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<punct>[<>\[\](){},=;])
    )""",
    re.VERBOSE,
)
SCALAR_TYPES = ("fp16", "fp32", "int32", "bool", "string", "uint64")
FLOAT_TYPES: tuple[DType, ...] = ("fp16", "fp32")


class MilSyntaxError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"MIL line {line}: {message}")
        self.line = line


@attrs.frozen
class MilType:
    """``tensor<dtype, [shape]>``, or a scalar (``shape is None``)."""

    dtype: str
    shape: tuple[int, ...] | None = None

    def __str__(self) -> str:
        if self.shape is None:
            return self.dtype
        return f"tensor<{self.dtype}, [{', '.join(map(str, self.shape))}]>"


@attrs.frozen
class Blobfile:
    path: str
    offset: int


@attrs.frozen
class Scalar:
    dtype: str
    value: str | int | float | bool


#: a const's value: a scalar, an int32 vector, or a tensor in the weight file
Literal = Scalar | tuple[int, ...] | Blobfile


@attrs.frozen
class Statement:
    line: int
    outputs: tuple[tuple[MilType, str], ...]
    op: str
    args: dict[str, str | tuple[str, ...]]  # argument -> variable name(s)
    value: Literal | None  # a const's val


@attrs.frozen
class Function:
    target: str
    inputs: tuple[tuple[MilType, str], ...]
    body: tuple[Statement, ...]
    outputs: tuple[str, ...]


@attrs.frozen
class Token:
    kind: str
    text: str
    line: int


def tokens(text: str) -> Iterator[Token]:
    pos, line = 0, 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            rest = text[pos:].lstrip()
            if not rest:
                return
            line += text.count("\n", pos, len(text) - len(rest))
            raise MilSyntaxError(line, f"unexpected text {rest[:20]!r}")
        line += text.count("\n", pos, match.start(match.lastgroup or 0))
        kind = match.lastgroup or ""
        yield Token(kind, match.group(kind), line)
        pos = match.end()


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = list(tokens(text))
        self.i = 0

    @property
    def line(self) -> int:
        return self.toks[min(self.i, len(self.toks) - 1)].line if self.toks else 1

    def peek(self, offset: int = 0) -> Token | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def take(self, text: str | None = None, kind: str | None = None) -> Token:
        tok = self.peek()
        if tok is None:
            raise MilSyntaxError(self.line, f"unexpected end, expected {text or kind}")
        if (text is not None and tok.text != text) or (kind is not None and tok.kind != kind):
            raise MilSyntaxError(tok.line, f"expected {text or kind}, found {tok.text!r}")
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text

    def skip_group(self, open_: str, close: str) -> None:
        depth = 0
        while True:
            tok = self.take()
            depth += (tok.text == open_) - (tok.text == close)
            if depth == 0:
                return

    # -- grammar ------------------------------------------------------------

    def program(self) -> Function:
        self.take("program")
        self.take("(")
        self.take(kind="number")
        self.take(")")
        if self.at("["):
            self.skip_group("[", "]")  # attributes such as buildInfo
        self.take("{")
        self.take("func")
        self.take("main")
        self.take("<")
        target = self.take(kind="ident").text
        self.take(">")
        self.take("(")
        inputs = []
        while not self.at(")"):
            mil_type = self.type_()
            inputs.append((mil_type, self.take(kind="ident").text))
            if not self.at(")"):
                self.take(",")
        self.take(")")
        self.take("{")
        body = []
        while not self.at("}"):
            body.append(self.statement())
        self.take("}")
        self.take("->")
        outputs = tuple(self.names())
        self.take(";")
        self.take("}")
        if self.peek() is not None:
            raise MilSyntaxError(self.line, "text after the program's end")
        return Function(target, tuple(inputs), tuple(body), outputs)

    def type_(self) -> MilType:
        tok = self.take(kind="ident")
        if tok.text in SCALAR_TYPES:
            return MilType(tok.text)
        if tok.text != "tensor":
            raise MilSyntaxError(tok.line, f"unknown type {tok.text!r}")
        self.take("<")
        dtype = self.take(kind="ident").text
        if dtype not in SCALAR_TYPES:
            raise MilSyntaxError(tok.line, f"unknown element type {dtype!r}")
        self.take(",")
        shape = self.int_list()
        self.take(">")
        return MilType(dtype, shape)

    def int_list(self) -> tuple[int, ...]:
        self.take("[")
        values = []
        while not self.at("]"):
            values.append(int(self.take(kind="number").text))
            if not self.at("]"):
                self.take(",")
        self.take("]")
        return tuple(values)

    def names(self) -> list[str]:
        self.take("(")
        names = []
        while not self.at(")"):
            names.append(self.take(kind="ident").text)
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return names

    def statement(self) -> Statement:
        line = self.line
        outputs = []
        while True:
            mil_type = self.type_()
            outputs.append((mil_type, self.take(kind="ident").text))
            if not self.at(","):
                break
            self.take(",")
        self.take("=")
        op = self.take(kind="ident").text
        self.take("(")
        args: dict[str, str | tuple[str, ...]] = {}
        while not self.at(")"):
            key = self.take(kind="ident").text
            self.take("=")
            if key in args:
                raise MilSyntaxError(line, f"argument {key!r} given twice")
            args[key] = tuple(self.names()) if self.at("(") else self.take(kind="ident").text
            if not self.at(")"):
                self.take(",")
        self.take(")")
        self.take("[")
        attributes: dict[str, Literal] = {}
        while not self.at("]"):
            key = self.take(kind="ident").text
            self.take("=")
            attributes[key] = self.literal()
            if not self.at("]"):
                self.take(",")
        self.take("]")
        self.take(";")
        name = attributes.get("name")
        if name != Scalar("string", outputs[0][1]):
            raise MilSyntaxError(line, f"name attribute {name!r} differs from {outputs[0][1]!r}")
        if (op == "const") != ("val" in attributes):
            raise MilSyntaxError(line, "a const needs a val, and only a const has one")
        return Statement(line, tuple(outputs), op, args, attributes.get("val"))

    def literal(self) -> Literal:
        tok = self.peek()
        if tok is not None and tok.text == "tensor":
            mil_type = self.type_()
            self.take("(")
            if self.at("BLOBFILE"):
                self.take("BLOBFILE")
                self.take("(")
                self.take("path")
                self.take("=")
                path = self.literal()
                self.take(",")
                self.take("offset")
                self.take("=")
                offset = self.literal()
                self.take(")")
                self.take(")")
                if not (
                    isinstance(path, Scalar)
                    and isinstance(offset, Scalar)
                    and (path.dtype, offset.dtype) == ("string", "uint64")
                ):
                    raise MilSyntaxError(tok.line, "BLOBFILE needs a string path and uint64 offset")
                return Blobfile(str(path.value), int(offset.value))
            values = self.int_list()
            self.take(")")
            if mil_type.dtype != "int32" or mil_type.shape != (len(values),):
                raise MilSyntaxError(tok.line, f"{mil_type} literal with {len(values)} values")
            return values
        kind = self.take(kind="ident")
        self.take("(")
        raw = self.take()
        self.take(")")
        value: str | int | float | bool | None = None
        try:
            if kind.text == "string" and raw.kind == "string":
                value = raw.text[1:-1]
            elif kind.text == "bool" and raw.text in ("true", "false"):
                value = raw.text == "true"
            elif kind.text in ("int32", "uint64") and raw.kind == "number":
                value = int(raw.text)
            elif kind.text in FLOAT_TYPES and raw.kind == "number":
                value = float.fromhex(raw.text) if "0x" in raw.text else float(raw.text)
        except ValueError:
            pass
        if value is not None:
            return Scalar(kind.text, value)
        raise MilSyntaxError(kind.line, f"bad {kind.text} literal {raw.text!r}")


def parse(text: str) -> Function:
    """The program's main function, or :class:`MilSyntaxError`."""
    return _Parser(text).program()
