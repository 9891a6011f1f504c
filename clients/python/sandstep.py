"""sandstep's Python client: direct sandboxes, from anywhere, standard library only.

Inside a sandstep sandbox it is importable from /opt/sandstep/python and
needs no arguments: SANDSTEP_URL and SANDSTEP_TOKEN are in the environment,
and that token manages the sandbox's own children (within the limits per
parent: 429 names the limit and says when to retry).

    import sys; sys.path.insert(0, "/opt/sandstep/python")
    import sandstep

    out, err, code = sandstep.run_isolated_task("print(6 * 7)")
    sb, url = sandstep.deploy_webapp({"/workspace/app/index.html": "hi"},
                                     "python3 -m http.server 3000 -d /workspace/app", port=3000)

The function shapes follow the agent library of seed 004 (SandyClient,
deploy_webapp, run_isolated_task), synchronous.
"""

import base64
import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

__all__ = ["Sandbox", "Client", "APIError", "LimitExceeded", "create_sandbox", "exec", "write_file",
           "read_file", "terminate", "deploy_webapp", "run_isolated_task"]


class APIError(Exception):
    """An error answer of the API: status, code, message and the field at fault."""

    def __init__(self, status, body):
        err = (body or {}).get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code = err.get("code", "")
        self.field = err.get("field", "")
        self.body = body
        super().__init__("%d %s: %s" % (status, self.code, err.get("message", body)))


class LimitExceeded(APIError):
    """429: a limit (such as max_children or children_per_hour) refused the request."""

    def __init__(self, status, body, retry_after):
        super().__init__(status, body)
        err = body.get("error", {}) if isinstance(body, dict) else {}
        self.limit = err.get("limit", "")
        self.max = err.get("max", 0)
        self.retry_after = retry_after


@dataclass
class Sandbox:
    id: str
    public_url: str
    status: str
    ttl_remaining: int
    public_urls: dict = field(default_factory=dict)
    parent_id: str = None


def _sandbox(d):
    urls = d.get("public_urls") or {}
    first = urls[sorted(urls, key=int)[0]] if urls else ""
    return Sandbox(id=d["id"], public_url=first, status=d.get("status", ""), ttl_remaining=d.get("ttl_remaining", 0),
                   public_urls=urls, parent_id=d.get("parent_id"))


class Client:
    """A client of sandstep's /v1/sandboxes API."""

    def __init__(self, base_url=None, token=None, timeout=60):
        self.base_url = (base_url or os.environ.get("SANDSTEP_URL", "")).rstrip("/")
        self.token = token or os.environ.get("SANDSTEP_TOKEN", "")
        self.timeout = timeout
        if not self.base_url:
            raise ValueError("SANDSTEP_URL is not set and no base_url was given")

    def _request(self, method, path, body=None, raw=None, headers=None, timeout=None):
        data = None
        h = {"Authorization": "Bearer " + self.token} if self.token else {}
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        elif raw is not None:
            data = raw
            h["Content-Type"] = "application/octet-stream"
        h.update(headers or {})
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as res:
                return res.status, dict(res.headers), res.read()
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = {"error": {"message": payload.decode("utf-8", "replace")}}
            if e.code == 429:
                raise LimitExceeded(e.code, parsed, int(e.headers.get("Retry-After") or 1)) from None
            raise APIError(e.code, parsed) from None

    def _json(self, method, path, body=None, timeout=None):
        _, _, payload = self._request(method, path, body=body, timeout=timeout)
        return json.loads(payload)

    def create_sandbox(self, ttl_seconds=600, expose_ports=None, network=None, allow_hosts=None, memory_mb=None,
                       labels=None, name=None):
        body = {"ttl_seconds": ttl_seconds, "expose_ports": expose_ports or []}
        for k, v in (("network", network), ("allow_hosts", allow_hosts), ("memory_mb", memory_mb),
                     ("labels", labels), ("name", name)):
            if v is not None:
                body[k] = v
        return _sandbox(self._json("POST", "/v1/sandboxes", body, timeout=max(self.timeout, 120)))

    def get_status(self, sandbox_id):
        return _sandbox(self._json("GET", "/v1/sandboxes/" + _q(sandbox_id)))

    def list_sandboxes(self):
        return [_sandbox(d) for d in self._json("GET", "/v1/sandboxes")["sandboxes"]]

    def exec(self, sandbox_id, command, timeout=300, env=None, cwd=None, stdin=None):
        """Runs command (shell text, or a list of arguments); returns (stdout, stderr, exit_code).

        A command that outlasts the server's wait is followed by its output
        offsets until it ends, so nothing is lost however long it runs."""
        body = {"timeout_seconds": int(timeout)}
        body["argv" if isinstance(command, (list, tuple)) else "command"] = list(command) if isinstance(command, (list, tuple)) else command
        if env:
            body["env"] = env
        if cwd:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin_base64"] = base64.b64encode(stdin.encode() if isinstance(stdin, str) else stdin).decode()
        res = self._json("POST", "/v1/sandboxes/%s/exec" % _q(sandbox_id), body, timeout=60)
        if res.get("stdout") is not None and res.get("exit_code") is not None:
            return res["stdout"], res["stderr"], res["exit_code"]
        out, _ = self.read_output(sandbox_id, res["exec_id"], "stdout")
        err, code = self.read_output(sandbox_id, res["exec_id"], "stderr")
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code

    def start(self, sandbox_id, command, timeout=3600, keep_alive=False):
        """Starts command in the background; returns its exec id."""
        body = {"command": command, "timeout_seconds": int(timeout), "background": True, "keep_alive": keep_alive}
        return self._json("POST", "/v1/sandboxes/%s/exec" % _q(sandbox_id), body)["exec_id"]

    def read_output(self, sandbox_id, exec_id, stream="stdout", offset=0, max_retries=20):
        """Reads an exec's stream from offset to its end; returns (bytes, exit_code).

        A read that breaks (the connection drops, the server restarts, a
        gateway answers 502/503/504) is read again from the same offset, so
        nothing is lost or repeated; max_retries failures in a row give up."""
        chunks = []
        fails = 0
        while True:
            path = "/v1/sandboxes/%s/execs/%s/output?stream=%s&offset=%d&wait_ms=20000" % (
                _q(sandbox_id), _q(exec_id), stream, offset)
            try:
                _, headers, data = self._request("GET", path, timeout=60)
            except APIError as e:
                if e.status not in (502, 503, 504) or fails >= max_retries:
                    raise
                fails += 1
                time.sleep(min(0.2 * 2 ** fails, 5))
                continue
            except (urllib.error.URLError, http.client.HTTPException, OSError):
                if fails >= max_retries:
                    raise
                fails += 1
                time.sleep(min(0.2 * 2 ** fails, 5))  # resume from the same offset
                continue
            fails = 0
            h = {k.lower(): v for k, v in headers.items()}
            chunks.append(data)
            offset = int(h["x-sandstep-next-offset"])
            if h.get("x-sandstep-exec-done") == "true":
                return b"".join(chunks), int(h.get("x-sandstep-exit-code", "-1"))

    def write_file(self, sandbox_id, path, content):
        if isinstance(content, str):
            content = content.encode("utf-8")
        self._request("PUT", "/v1/sandboxes/%s/files?path=%s" % (_q(sandbox_id), _q(path)), raw=content)

    def read_file(self, sandbox_id, path):
        return self._request("GET", "/v1/sandboxes/%s/files?path=%s" % (_q(sandbox_id), _q(path)))[2]

    def list_artifacts(self, sandbox_id):
        """The files of the sandbox's artifacts folder, at any depth: a list of dicts with path, size,
        content_type and url (a path on the API), by path."""
        return self._json("GET", "/v1/sandboxes/%s/artifacts" % _q(sandbox_id))["artifacts"]

    def terminate(self, sandbox_id):
        self._json("POST", "/v1/sandboxes/%s/terminate" % _q(sandbox_id))

    def deploy_webapp(self, files, start_command, port=3000, ttl_minutes=30, install_command=None, ready_timeout=30):
        """Starts a web app in a new sandbox; returns (Sandbox, its public URL) once the app answers."""
        sb = self.create_sandbox(ttl_seconds=ttl_minutes * 60, expose_ports=[port])
        try:
            for path, content in files.items():
                self.write_file(sb.id, path, content)
            if install_command:
                _, err, code = self.exec(sb.id, install_command, timeout=600)
                if code != 0:
                    raise RuntimeError("install failed: " + err)
            self.start(sb.id, start_command, timeout=ttl_minutes * 60, keep_alive=True)
            deadline = time.time() + ready_timeout
            probe = "i=0; until (exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done" % port
            while True:
                _, _, code = self.exec(sb.id, ["bash", "-c", probe], timeout=30)
                if code == 0:
                    break
                if time.time() > deadline:
                    raise RuntimeError("the app does not listen on port %d" % port)
            return sb, sb.public_urls[str(port)]
        except Exception:
            self.terminate(sb.id)
            raise

    def run_isolated_task(self, script, language="python", timeout=300):
        """Runs script in a new sandbox, which ends with it; returns (stdout, stderr, exit_code)."""
        sb = self.create_sandbox(ttl_seconds=timeout + 60)
        try:
            ext = {"python": "py", "node": "js", "bash": "sh"}.get(language, "txt")
            path = "/workspace/task." + ext
            self.write_file(sb.id, path, script)
            cmd = {"python": ["python3", path], "node": ["node", path], "bash": ["bash", path]}.get(language, ["cat", path])
            return self.exec(sb.id, cmd, timeout=timeout)
        finally:
            self.terminate(sb.id)


def _q(s):
    return urllib.parse.quote(str(s), safe="")


_default = None


def _client():
    global _default
    if _default is None:
        _default = Client()
    return _default


def create_sandbox(ttl_seconds=600, expose_ports=None, **kw):
    return _client().create_sandbox(ttl_seconds=ttl_seconds, expose_ports=expose_ports, **kw)


def exec(sandbox_id, command, timeout=300, **kw):  # noqa: A001 (the seed's name)
    return _client().exec(sandbox_id, command, timeout=timeout, **kw)


def write_file(sandbox_id, path, content):
    return _client().write_file(sandbox_id, path, content)


def read_file(sandbox_id, path):
    return _client().read_file(sandbox_id, path)


def list_artifacts(sandbox_id):
    return _client().list_artifacts(sandbox_id)


def terminate(sandbox_id):
    return _client().terminate(sandbox_id)


def deploy_webapp(files, start_command, port=3000, ttl_minutes=30, install_command=None):
    return _client().deploy_webapp(files, start_command, port=port, ttl_minutes=ttl_minutes,
                                   install_command=install_command)


def run_isolated_task(script, language="python", timeout=300):
    return _client().run_isolated_task(script, language=language, timeout=timeout)
