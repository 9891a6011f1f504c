# The Python runner: python3 -c runs it with the user's code on standard
# input. Like the REPL, it evaluates the last statement separately when it
# is an expression, so its value is the result (top-level await allowed),
# and after the code's own output writes one line:
# "\n" + SANDSTEP_MARK + {"ok","error","truncated","result"}.
import ast, json, os, sys

# asyncio and traceback are imported when needed: asyncio alone takes
# longer to import than Python takes to start.

mark = os.environ.pop("SANDSTEP_MARK", "")
max_result = int(os.environ.pop("SANDSTEP_MAX_RESULT", "65536"))
os.environ.pop("SANDSTEP_LANG", None)
src = sys.stdin.read()
sys.stdin = open(os.devnull)
sys.argv = ["main.py"]
sys.path.insert(0, os.getcwd())
scope = {"__name__": "__main__", "__builtins__": __builtins__}
flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
CO_COROUTINE = 0x80
loop = None


def run(code):
    global loop
    value = eval(code, scope)
    if code.co_flags & CO_COROUTINE:
        if loop is None:
            import asyncio

            loop = asyncio.new_event_loop()
        value = loop.run_until_complete(value)
    return value


def describe(e):
    import linecache, traceback

    linecache.cache["main.py"] = (len(src), None, src.splitlines(True), "main.py")
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == "main.py"]
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames) if frames else []
    return "".join(lines + traceback.format_exception_only(type(e), e)).rstrip()


def encode(v):
    if v is None:
        return "null"
    try:
        return json.dumps(v, default=repr, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(repr(v), ensure_ascii=False)


ok, error, status, value = True, None, 0, None
try:
    tree = ast.parse(src, "main.py", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    run(compile(tree, "main.py", "exec", flags=flags))
    if last is not None:
        value = run(compile(last, "main.py", "eval", flags=flags))
except SystemExit as e:
    status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if status != 0:
        ok, error = False, "SystemExit: %s" % e.code
except BaseException as e:
    ok, error, status = False, describe(e), 1

result = encode(value) if ok else "null"
truncated = len(result.encode()) > max_result
if truncated:
    result = json.dumps(result[:max_result], ensure_ascii=False)
sys.stdout.flush()
sys.stderr.flush()
meta = json.dumps({"ok": ok, "error": error, "truncated": truncated})
sys.stdout.write("\n" + mark + meta[:-1] + ', "result": ' + result + "}\n")
sys.stdout.flush()
os._exit(status)
