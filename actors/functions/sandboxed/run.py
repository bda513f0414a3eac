"""Runs one Python function inside the sandbox (started as ``python3 -I -S -B run.py``).

stdin: ``marshal.dumps((code, input_value, result_fd))`` written by the runner (trusted).
The code's module body becomes the body of one function through the AST, so a top-level
``return`` is a real return, and names bound at the top stay module globals (a ``global``
statement lists them).
The return value goes to the result pipe (its descriptor number comes on stdin), never to
stdout, as one kind letter and a payload:
``V`` + JSON, ``T`` + text (a value JSON cannot hold), ``N`` (no return value), ``E`` + message.

Only builtin modules are imported here (``json`` and ``ast`` would cost ≈20 ms per run).
"""

import _ast
import _json
import builtins
import marshal
import posix
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs an import per run; only the checker reads these
    from typing import Any

MAIN = "__cairn_main__"
NO_RETURN = "__cairn_no_return__"
STAR = "__cairn_import_star__"
FILENAME = "main.py"


class _Scope:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.is_async = False


def _visit(node: "Any", scope: "_Scope") -> "Any":
    return _fields(node, scope, node._fields)


def _fields(node: "Any", scope: "_Scope", names: "tuple[str, ...]") -> "Any":
    for field in names:
        value = getattr(node, field, None)
        if isinstance(value, list):
            items = [_child(v, scope) if isinstance(v, _ast.AST) else v for v in value]
            setattr(node, field, items)
        elif isinstance(value, _ast.AST):
            setattr(node, field, _child(value, scope))
    return node


def _child(node: "Any", scope: "_Scope") -> "Any":
    """Visit one node of the top-level scope; nested function and class bodies are their own
    scopes and are left alone (only what runs at definition time is visited)."""
    kind = type(node)
    if kind is _ast.FunctionDef or kind is _ast.AsyncFunctionDef:
        scope.names.add(node.name)
        return _fields(node, scope, ("decorator_list", "args", "returns"))
    if kind is _ast.ClassDef:
        scope.names.add(node.name)
        return _fields(node, scope, ("decorator_list", "bases", "keywords"))
    if kind is _ast.Lambda:
        return _fields(node, scope, ("args",))
    if kind is _ast.comprehension:
        if node.is_async:
            scope.is_async = True
        return _fields(node, scope, ("iter", "ifs"))  # the target is the comprehension's own
    if kind is _ast.Name:
        if type(node.ctx) is not _ast.Load:
            scope.names.add(node.id)
        return node
    if kind is _ast.Import:
        for alias in node.names:
            scope.names.add(alias.asname or alias.name.partition(".")[0])
        return node
    if kind is _ast.ImportFrom:
        if any(alias.name == "*" for alias in node.names):
            return _star_import(node)
        for alias in node.names:
            scope.names.add(alias.asname or alias.name)
        return node
    binds_name = kind is _ast.ExceptHandler or kind is _ast.MatchAs or kind is _ast.MatchStar
    if binds_name and node.name:
        scope.names.add(node.name)
    elif kind is _ast.MatchMapping and node.rest:
        scope.names.add(node.rest)
    elif kind is _ast.Await or kind is _ast.AsyncFor or kind is _ast.AsyncWith:
        scope.is_async = True
    elif kind is _ast.Yield or kind is _ast.YieldFrom:
        error = SyntaxError("'yield' outside function")
        error.lineno, error.filename = node.lineno, FILENAME
        raise error
    elif kind is _ast.Return and node.value is None:
        # A bare return gives no value, exactly like falling off the end.
        node.value = _at(_ast.Name(id=NO_RETURN, ctx=_ast.Load()), node)
    return _visit(node, scope)


def _at(new: "Any", old: "Any") -> "Any":
    new.lineno, new.col_offset = old.lineno, old.col_offset
    new.end_lineno, new.end_col_offset = old.end_lineno, old.end_col_offset
    return new


def _star_import(node: "Any") -> "Any":
    # "import *" is only legal in a module; the function body calls a helper instead.
    call = _ast.Call(
        func=_at(_ast.Name(id=STAR, ctx=_ast.Load()), node),
        args=[
            _at(_ast.Constant(value=node.module or ""), node),
            _at(_ast.Constant(value=node.level), node),
        ],
        keywords=[],
    )
    return _at(_ast.Expr(value=_at(call, node)), node)


def build(code: str) -> "tuple[Any, bool]":
    """The code object of the module that defines the function, and whether it is async."""
    module: Any = compile(code, FILENAME, "exec", _ast.PyCF_ONLY_AST)
    scope = _Scope()
    body = [_child(statement, scope) for statement in module.body]
    first = body[0] if body else None
    anchor = first or _ast.Pass(lineno=1, col_offset=0, end_lineno=1, end_col_offset=0)
    prologue = [_at(_ast.Global(names=sorted(scope.names)), anchor)] if scope.names else []
    last = body[-1] if body else anchor
    epilogue = [_at(_ast.Return(value=_at(_ast.Name(id=NO_RETURN, ctx=_ast.Load()), last)), last)]
    arguments = _ast.arguments(
        posonlyargs=[],
        args=[],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    kind = _ast.AsyncFunctionDef if scope.is_async else _ast.FunctionDef
    function = _at(
        kind(
            name=MAIN,
            args=arguments,
            body=prologue + body + epilogue,
            decorator_list=[],
            returns=None,
            type_comment=None,
        ),
        anchor,
    )
    wrapper = _ast.Module(body=[function], type_ignores=[])
    return compile(wrapper, FILENAME, "exec"), scope.is_async


def _import_star(namespace: "dict[str, Any]") -> "Any":
    def import_star(module: str, level: int) -> None:
        imported = __import__(module, namespace, None, ("*",), level)
        names = getattr(imported, "__all__", None)
        if names is None:
            names = [name for name in dir(imported) if not name.startswith("_")]
        for name in names:
            namespace[name] = getattr(imported, name)

    return import_star


def _fail(value: object) -> "Any":
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_ENCODE = _json.make_encoder(
    {}, _fail, _json.encode_basestring_ascii, None, ":", ",", False, False, False
)


def encode(value: object) -> str:
    if value is NO_RETURN_VALUE:
        return "N"
    try:
        return "V" + "".join(_ENCODE(value, 0))
    except (TypeError, ValueError, RecursionError):
        try:
            return "T" + str(value)
        except Exception:
            return "T" + object.__repr__(value)


def describe(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, SyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return f"{name}: {exc.msg}{where}"
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"{name}: {text}" if text else name


def report(payload: str, fd: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib would be one more import per run)
            stream.flush()
        except Exception:
            pass
    data = payload.encode("utf-8", "backslashreplace")
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]


NO_RETURN_VALUE = object()


def main() -> None:
    code, value, fd = marshal.loads(sys.stdin.buffer.read())
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.argv = [FILENAME]
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__builtins__": builtins,
        NO_RETURN: NO_RETURN_VALUE,
    }
    namespace[STAR] = _import_star(namespace)
    namespace["event"] = namespace["input"] = value  # one object, parsed once
    try:
        program, is_async = build(code)
        exec(program, namespace)
        function = namespace.pop(MAIN)
        if is_async:
            import asyncio

            result = asyncio.run(function())
        else:
            result = function()
    except Exception as exc:
        # The wrapper's own frame is noise in the user's traceback.
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        report("E" + describe(exc), fd)
    else:
        report(encode(result), fd)
    posix._exit(0)  # threads the code left behind must not keep the run alive


main()
