# The Python runner: python3 -c runs it with the user's code on standard
# input. Like the REPL, it evaluates the last statement separately when it
# is an expression, so its value is the result (top-level await allowed),
# and after the code's own output writes one line:
# "\n" + SANDSTEP_MARK + {"ok","error","truncated","result"}.
#
# With SANDSTEP_KERNEL set it is a session's stateful interpreter
# (sandstep-kernel): it runs one piece of code after another in the same
# scope, so that variables and imports persist, as stateful.go describes.
import ast, json, os, sys

# asyncio and traceback are imported when needed: asyncio alone takes
# longer to import than Python takes to start.

mark = os.environ.pop("SANDSTEP_MARK", "")
max_result = int(os.environ.pop("SANDSTEP_MAX_RESULT", "65536"))
kernel = os.environ.pop("SANDSTEP_KERNEL", "")
os.environ.pop("SANDSTEP_LANG", None)
src = ""
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


def execute(extra=None):
    """Runs src, writes the verdict line and returns the exit status."""
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
    meta = dict(ok=ok, error=error, truncated=truncated)
    if extra:
        meta.update(extra)
    meta = json.dumps(meta)
    sys.stdout.write("\n" + mark + meta[:-1] + ', "result": ' + result + "}\n")
    sys.stdout.flush()
    return status


def serve():
    """The stateful interpreter (see stateful.go): a request comes as one
    line on the FIFO ctl, "<client pid> <mark> <started 0|1> <why state
    was lost>". The code is the client's standard input and the output
    goes to its standard output and error (its fds 7, 8 and 9); the FIFO status gets
    "<client pid> <exit status>". status is held open, for reading and writing, for the
    interpreter's whole life: a client reading it meets its end only when the interpreter is
    gone, and a line for a client that went away waits in it instead of failing."""
    global src, mark
    null = os.open(os.devnull, os.O_RDWR)
    ctl = os.open(os.path.join(kernel, "ctl"), os.O_RDWR)
    status = os.open(os.path.join(kernel, "status"), os.O_RDWR)
    with open(os.path.join(kernel, "pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(kernel, "pid.tmp"), os.path.join(kernel, "pid"))
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = os.read(ctl, 4096)
            if not chunk:
                return
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        client, mark, started, lost = (line.decode().split(" ", 3) + ["", "", "", ""])[:4]
        code = 1
        try:
            fd = "/proc/%s/fd/" % client
            with open(fd + "7") as f:
                src = f.read()
            out = os.open(fd + "8", os.O_WRONLY)
            err = os.open(fd + "9", os.O_WRONLY)
        except OSError:
            pass  # the client is gone
        else:
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.close(out)
            os.close(err)
            extra = {"interpreter": {"started": started == "1"}}
            if lost:
                extra["interpreter"]["state_lost"] = lost
            try:
                code = execute(extra)
            finally:
                # The client's output ends with the run.
                os.dup2(null, 1)
                os.dup2(null, 2)
        os.write(status, ("%s %d\n" % (client, code)).encode())


if kernel:
    sys.stdin = open(os.devnull)
    serve()
    os._exit(0)
src = sys.stdin.read()
sys.stdin = open(os.devnull)
os._exit(execute())
