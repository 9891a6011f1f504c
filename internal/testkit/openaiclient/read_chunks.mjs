// Reads an agent run's events as OpenAI chat-completion chunks with
// OpenAI's official client (the npm package openai, pinned in
// package-lock.json), the way an application reads a streamed completion:
// the client's streaming API (a GET with stream: true, whose Stream parses
// the Server-Sent Events and stops at [DONE]) fed to ChatCompletionStream,
// which accumulates the chunks into a completion and refuses one without a
// role or a finish_reason.
//
// usage: node read_chunks.mjs OPENAI_DIR BASE_URL TOKEN RUN_ID [LAST_EVENT_ID]
// Prints one JSON line per chunk as it arrives ({"chunk": ...}) and, once the
// stream ended, {"final": <the accumulated completion>}; an error is
// {"error": "..."} and exit status 1.
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [dir, baseURL, token, runID, lastEventID] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(dir, 'index.mjs')).href);
const { ChatCompletionStream } = await import(pathToFileURL(path.join(dir, 'lib', 'ChatCompletionStream.mjs')).href);

const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');
try {
  const client = new OpenAI({ apiKey: token, baseURL: baseURL + '/v1', maxRetries: 0, timeout: 240_000 });
  const stream = await client.get(`/agent-runs/${encodeURIComponent(runID)}/events`, {
    query: { format: 'openai-chunks' },
    headers: lastEventID ? { 'Last-Event-ID': lastEventID } : {},
    stream: true,
  });
  const runner = ChatCompletionStream.fromReadableStream(stream.toReadableStream());
  runner.on('chunk', (chunk) => out({ chunk }));
  const final = await runner.finalChatCompletion();
  out({ final });
} catch (e) {
  out({ error: String(e && e.stack || e) });
  process.exit(1);
}
