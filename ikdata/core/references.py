"""A reference's source read without running it: bounded parsing, and what ``run``'s signature says.

Definitions from a dataset are untrusted, yet ``validate`` parses their references.
Python's parser recurses once per nesting level and runs out of stack or memory on a
few thousand levels, so the source is first tokenized (iteratively) against size and
nesting limits. What ``run`` takes and returns then decides the declared order of a
definition's inputs and outputs (:mod:`ikdata.core.definitions`).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass

# Bounds on parsing a reference (which validate does for untrusted definitions too): Python's
# parser recurses per nesting level and runs out of stack or memory on a few thousand levels
# (100,000 unary minus signs: MemoryError; 5,000 chained subscripts: RecursionError).
MAX_REFERENCE_CHARS = 256 * 1024  # shipped references are under 2 KiB
MAX_NESTING = 100                  # brackets open at once
MAX_CHAIN = 1000                   # operators and brackets in one logical line


@dataclass(frozen=True)
class RunSignature:
    """What the parsed source says about ``run``: its parameters and the names it returns.

    Attributes:
        required: parameters without a default, in order (positional ones first).
        positional: every positional parameter, in order.
        varargs: ``run`` takes ``*args`` or ``**kwargs``.
        returns: the output names every ``return`` gives, in order, when each returns a
            name or a tuple of names; None when the source does not say.
        line: the line of ``def run`` in the reference.
    """

    required: tuple[str, ...]
    positional: tuple[str, ...]
    varargs: bool
    returns: tuple[str, ...] | None
    line: int


def _reference_limits(source: str) -> str | None:
    """Why a reference is too large or too deeply nested to parse safely (None: it is not).

    Tokenizing is iterative, so this costs linear time and no recursion whatever the source.
    """
    if len(source) > MAX_REFERENCE_CHARS:
        return (f"reference is {len(source):,} characters; the limit is {MAX_REFERENCE_CHARS:,} (a reference is "
                "the Python source of one operator)")
    depth = chain = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NEWLINE:
                chain = 0
            elif token.type == tokenize.OP:
                if token.string in "([{":
                    depth += 1
                    if depth > MAX_NESTING:
                        return (f"reference line {token.start[0]}: brackets nested more than {MAX_NESTING} deep; "
                                "ikdata does not parse a reference nested this deeply")
                elif token.string in ")]}":
                    depth = max(0, depth - 1)
                if token.string not in (",", ":", ")", "]", "}", "=", ";"):
                    chain += 1
                    if chain > MAX_CHAIN:
                        return (f"reference line {token.start[0]}: more than {MAX_CHAIN} operators in one "
                                "statement; ikdata does not parse an expression nested this deeply")
            elif token.type == tokenize.NAME and token.string in ("not", "and", "or", "lambda", "if", "await"):
                chain += 1
                if chain > MAX_CHAIN:
                    return (f"reference line {token.start[0]}: more than {MAX_CHAIN} operators in one statement; "
                            "ikdata does not parse an expression nested this deeply")
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None  # ast.parse reports the syntax error with its line
    return None


def parse_reference(source: str) -> tuple[ast.Module | None, str | None]:
    """Parse a reference without running it, within the size and nesting limits.

    Returns:
        (the module's AST, None), or (None, why it cannot be parsed): a syntax error with
        its line, or a limit it exceeds. Never raises RecursionError or MemoryError.
    """
    reason = _reference_limits(source)
    if reason:
        return None, reason
    try:
        return ast.parse(source), None
    except SyntaxError as exc:
        return None, f"reference does not parse: line {exc.lineno}: {exc.msg}"
    except (RecursionError, MemoryError, ValueError) as exc:
        return None, (f"reference cannot be parsed within Python's limits ({type(exc).__name__}); "
                      "simplify its expressions")


def run_signature(tree: ast.Module, name: str = "run") -> RunSignature | None:
    """The entry's (``run``'s) parameters and returned names, read from the parsed source (None: no such
    top-level function)."""
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)
    if node is None:
        return None
    args = node.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    defaulted = len(args.defaults)
    required = positional[:len(positional) - defaulted] if defaulted else positional
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return RunSignature(tuple(required), tuple(positional), bool(args.vararg or args.kwarg), _returned_names(node),
                        node.lineno)


def _returned_names(node: ast.AST) -> tuple[str, ...] | None:
    """The names every ``return`` of ``run`` gives (nested functions excluded), if they all agree."""
    found: set[tuple[str, ...]] = set()
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.Return):
            value = child.value
            if isinstance(value, ast.Name):
                found.add((value.id,))
            elif isinstance(value, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in value.elts):
                found.add(tuple(e.id for e in value.elts))
            else:
                return None
        stack.extend(ast.iter_child_nodes(child))
    return found.pop() if len(found) == 1 else None


def takes_inputs(signature: RunSignature, inputs: list[str]) -> bool:
    """``run``'s first positional parameters are the inputs (in some order) and it needs nothing else."""
    return (not signature.varargs and set(signature.positional[:len(inputs)]) == set(inputs)
            and set(signature.required) <= set(inputs))


def entry_point(tree: ast.Module, named: str | None = None, *, single: bool = True) -> str | None:
    """The reference's entry function: ``named`` if given, else ``run``, else (``single``) the only top-level
    function, else the only ``_<op>_reference`` (FlashInfer's naming). None when none of these is there."""
    functions = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if named is not None:
        return named if named in functions else None
    if "run" in functions:
        return "run"
    if single and len(functions) == 1:
        return functions[0]
    suffixed = [f for f in functions if f.startswith("_") and f.endswith("_reference")]
    return suffixed[0] if len(suffixed) == 1 else None


def unbound_names(tree: ast.Module) -> list[str]:
    """Names the source reads that nothing in it binds and that are not builtins: helpers left out.

    A reference must be standalone (FlashInfer inlines its helpers ahead of it); this is read
    from the syntax alone, so attribute access and dynamic names are not followed.
    """
    import builtins

    bound: set[str] = set(dir(builtins)) | {"__name__", "__file__"}
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return sorted(loaded - bound)


__all__ = ["MAX_CHAIN", "MAX_NESTING", "MAX_REFERENCE_CHARS", "RunSignature", "entry_point", "parse_reference",
           "run_signature", "takes_inputs", "unbound_names"]
