package agents_test

// fakeClaude behaves like `claude -p PROMPT --output-format stream-json`:
// JSON lines on stdout (system init, assistant text and tool uses, tool
// results, the result). Its "model" is the Anthropic-compatible server at
// $ANTHROPIC_BASE_URL, called with $ANTHROPIC_API_KEY through the
// sandbox's proxy; its tools write /workspace/artifacts and start a child
// sandbox with sandstep's Python client. A prompt containing "slow" then
// waits, for the cancel and timeout tests.
const fakeClaude = `#!/usr/bin/env python3
import json, os, sys, time, urllib.request
sys.path.insert(0, "/opt/sandstep/python")
import sandstep

args = sys.argv[1:]
prompt = args[args.index("-p") + 1]
assert args[args.index("--output-format") + 1] == "stream-json"

def emit(obj):
    print(json.dumps(obj), flush=True)

def tool(name, tid, inp, result):
    emit({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": name, "input": inp}]}})
    emit({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": result}]}})

emit({"type": "system", "subtype": "init", "model": "claude-fake-1", "cwd": os.getcwd(), "tools": ["Write", "Bash"]})
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    data=json.dumps({"model": "claude-fake-1", "max_tokens": 256, "messages": [{"role": "user", "content": prompt}]}).encode(),
    headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01", "content-type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as r:
    reply = json.load(r)
answer = reply["content"][0]["text"]
used = reply["usage"]
emit({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "The model says: " + answer}]}})

os.makedirs("/workspace/artifacts/data", exist_ok=True)
notes = open("/workspace/notes/input.txt").read()
with open("/workspace/artifacts/report.md", "w") as f:
    f.write("# Kestrels\n\n" + answer + "\n\nNotes: " + notes)
with open("/workspace/artifacts/data/seen.json", "w") as f:
    json.dump({"key_seen": os.environ["ANTHROPIC_API_KEY"], "token_prefix": os.environ["SANDSTEP_TOKEN"][:4]}, f)
tool("Write", "toolu_1", {"file_path": "/workspace/artifacts/report.md"}, "File written")

child = sandstep.create_sandbox(ttl_seconds=600)
out, _, _ = sandstep.exec(child.id, "echo hello from the child")
tool("Bash", "toolu_2", {"command": "start a child sandbox"}, "child " + child.id + ": " + out.strip())

if "slow" in prompt:
    emit({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "waiting for the slow part"}]}})
    time.sleep(600)
# As Claude Code reports it: the session's usage, and per model.
emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": 3, "duration_ms": 1200,
      "total_cost_usd": 0.0012, "result": "Done: " + answer,
      "usage": {"input_tokens": used["input_tokens"], "output_tokens": used["output_tokens"],
                "cache_read_input_tokens": used["cache_read_input_tokens"], "cache_creation_input_tokens": used["cache_creation_input_tokens"]},
      "modelUsage": {"claude-fake-1": {"inputTokens": used["input_tokens"], "outputTokens": used["output_tokens"],
                                       "cacheReadInputTokens": used["cache_read_input_tokens"], "cacheCreationInputTokens": used["cache_creation_input_tokens"],
                                       "webSearchRequests": 0, "costUSD": 0.0012, "contextWindow": 200000}}})
`
