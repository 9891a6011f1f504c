// sandstep console: plain JavaScript, no build step. The token lives in
// sessionStorage (this tab only) and travels only in the Authorization
// header; routes are in the URL's fragment, which holds ids, never tokens.
'use strict';
(() => {
const TOKEN = 'sandstep.token';
const STEP_ICON = { pending: '○', running: '…', complete: '✓', error: '!' };
const TERMINAL = ['succeeded', 'failed', 'cancelled'];
const $ = (sel, root = document) => root.querySelector(sel);
let stop = () => {}; // ends the current page's stream and timers

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid);
  return el;
}
const announce = (msg) => { $('#announce').textContent = msg; };

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status; this.code = e.code; this.field = e.field;
  }
}

// api calls the API relative to the page, so that a stage prefix in front
// of it (API Gateway) is kept.
async function api(method, path, body, opts = {}) {
  const headers = { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN), Accept: opts.accept || 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: opts.signal });
  if (res.status === 401) { signOut('Your token was refused; sign in again.'); throw new APIError(401, await res.json().catch(() => null)); }
  const data = (res.headers.get('Content-Type') || '').startsWith('application/json') ? await res.json() : await res.text();
  if (!res.ok) throw new APIError(res.status, data);
  return { status: res.status, data, headers: res.headers };
}

function signOut(msg) {
  sessionStorage.removeItem(TOKEN);
  stop();
  $('#signin-error').textContent = msg || '';
  route();
}

function show(title, ...content) {
  const view = $('#view');
  view.replaceChildren(h('h1', { text: title }), ...content);
  document.title = title + ' · sandstep';
  return view;
}

function fmtTime(s) { return s ? new Date(s).toLocaleString() : '—'; }
function badge(status) { return h('span', { class: 'badge s-' + status, text: status }); }
function errorBox(err) { return h('p', { class: 'error', role: 'alert', text: err.message + (err.field ? ` (${err.field})` : '') }); }

// ---- jobs list and submit ----
async function jobsPage() {
  const list = h('tbody');
  const more = h('button', { type: 'button', class: 'secondary', hidden: true, text: 'Load more' });
  const filter = h('select', { id: 'filter' }, h('option', { value: '', text: 'all' }),
    ...TERMINAL.concat(['queued', 'running']).map((s) => h('option', { value: s, text: s })));
  const msg = h('p', { role: 'status' });
  let cursor = null;
  async function load(reset) {
    if (reset) { list.replaceChildren(); cursor = null; }
    const q = new URLSearchParams({ limit: '20' });
    if (cursor) q.set('cursor', cursor);
    if (filter.value) q.set('status', filter.value);
    try {
      const { data } = await api('GET', 'v1/jobs?' + q);
      for (const j of data.jobs) {
        list.append(h('tr', {},
          h('td', {}, h('a', { href: (j.type === 'agent' ? '#/agent-runs/' : '#/jobs/') + encodeURIComponent(j.job_id), text: j.job_id })),
          h('td', { class: 'q', text: j.type === 'agent' ? `agent ${j.mode}: ${j.query}` : j.query }), h('td', {}, badge(j.status)),
          h('td', { class: 'opt', text: fmtTime(j.created_at) })));
      }
      cursor = data.next_cursor; more.hidden = !cursor;
      msg.textContent = list.children.length ? '' : 'No jobs yet.';
    } catch (err) { msg.replaceChildren(errorBox(err)); }
  }
  more.addEventListener('click', () => load(false));
  filter.addEventListener('change', () => load(true));

  const form = h('form', { id: 'submit-form' },
    h('label', { for: 'query', text: 'Question' }), h('textarea', { id: 'query', name: 'query', required: true, maxlength: '2000' }),
    h('div', { class: 'row' },
      h('div', {}, h('label', { for: 'mode', text: 'Mode' }), h('select', { id: 'mode' }, h('option', { value: 'light', text: 'light' }), h('option', { value: 'max', text: 'max' }))),
      h('div', {}, h('label', { for: 'optimization', text: 'Optimization' }), h('select', { id: 'optimization' },
        ...['balanced', 'speed', 'quality'].map((o) => h('option', { value: o, text: o })))),
      h('div', {}, h('label', { for: 'job-id', text: 'Job id (optional)' }), h('input', { id: 'job-id', autocomplete: 'off' }))),
    h('label', { for: 'seeds', text: 'Seed URLs (optional, one per line)' }), h('textarea', { id: 'seeds' }),
    h('button', { type: 'submit', text: 'Start research' }), h('div', { id: 'submit-error' }));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { query: $('#query').value, mode: $('#mode').value, optimization: $('#optimization').value };
    const seeds = $('#seeds').value.split('\n').map((s) => s.trim()).filter(Boolean);
    if (seeds.length) body.seed_urls = seeds;
    if ($('#job-id').value.trim()) body.job_id = $('#job-id').value.trim();
    try {
      const { data } = await api('POST', 'v1/jobs', body);
      location.hash = '#/jobs/' + encodeURIComponent(data.job_id);
    } catch (err) { $('#submit-error').replaceChildren(errorBox(err)); }
  });
  show('Jobs', h('h2', { text: 'New research job' }), form, h('h2', { text: 'Your jobs' }),
    h('label', { for: 'filter', text: 'Status' }), filter,
    h('table', {}, h('thead', {}, h('tr', {}, h('th', { text: 'Job' }), h('th', { text: 'Question' }), h('th', { text: 'Status' }), h('th', { class: 'opt', text: 'Created' }))), list),
    msg, more);
  await load(true);
}

// ---- a job: steps live over SSE, the crawl bar, the report ----
function jobPage(id) {
  const base = 'v1/jobs/' + encodeURIComponent(id);
  const ctl = new AbortController();
  let timers = [];
  const kept = artifactsBox(ctl);
  stop = () => { ctl.abort(); timers.forEach(clearTimeout); timers = []; kept.revoke(); };
  const steps = h('ol', { class: 'steps', id: 'steps', 'aria-live': 'polite' });
  const bar = h('progress', { id: 'crawl-bar', max: '1', value: '0', 'aria-label': 'Pages crawled' });
  const barText = h('p', { id: 'crawl-text', class: 'hint' });
  const status = h('p', { id: 'job-status' });
  const cancel = h('button', { type: 'button', class: 'danger', id: 'cancel', text: 'Cancel job' });
  const notes = h('div', { id: 'notes' });
  const warnings = h('ul', { id: 'warnings' }, h('li', { class: 'hint', text: 'None.' }));
  const usage = h('div', { id: 'usage' });
  const log = h('ol', { id: 'event-log', class: 'hint' });
  const report = h('section', { id: 'report', 'aria-label': 'Report' });
  let job = null, reportShown = false, lastSeq = 0, refreshPending = false;

  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try { await api('POST', base + '/cancel'); announce('Cancel requested'); refresh(); } catch (err) { notes.replaceChildren(errorBox(err)); cancel.disabled = false; }
  });

  function renderJob() {
    status.replaceChildren('Status: ', badge(job.status), job.cancel_requested && job.status !== 'cancelled' ? ' (cancel requested)' : '',
      job.error ? h('span', { class: 'error', text: ' ' + job.error }) : '');
    steps.replaceChildren(...job.steps.map((s) => h('li', { 'data-step': s.id, 'data-status': s.status, class: 's-' + s.status },
      h('span', { class: 'icon', 'aria-hidden': 'true', text: STEP_ICON[s.status] || '?' }),
      h('span', { text: s.label }), h('span', { class: 'badge', text: s.status }),
      s.total ? h('span', { class: 'hint', text: `${s.current} / ${s.total}` }) : null)));
    const crawl = job.steps.find((s) => s.id === 'crawl');
    if (crawl && crawl.total) setBar(crawl.current, crawl.total);
    cancel.hidden = TERMINAL.includes(job.status) || job.cancel_requested;
    notes.replaceChildren(...(job.fallbacks.length ? [h('p', { class: 'warn' }, 'Fallbacks: ', job.fallbacks.join(', '))] : []));
    renderUsage();
    if (TERMINAL.includes(job.status) && !reportShown) { reportShown = true; loadReport(); }
  }
  function setBar(cur, total) {
    bar.max = total; bar.value = Math.min(cur, total);
    bar.setAttribute('aria-valuetext', `${cur} of ${total} pages`);
    barText.textContent = `${cur} of ${total} pages crawled`;
  }
  // Usage and cost, when the server reports them with the job.
  function renderUsage() {
    const rows = [];
    for (const key of ['usage', 'cost']) {
      const v = job[key];
      if (v === undefined || v === null) continue;
      const flat = typeof v === 'object' ? Object.entries(v) : [[key, v]];
      for (const [k, x] of flat) rows.push(h('dt', { text: k }), h('dd', { text: typeof x === 'object' ? JSON.stringify(x) : String(x) }));
    }
    usage.replaceChildren(...(rows.length ? [h('h2', { text: 'Usage and cost' }), h('dl', { class: 'kv' }, rows)] : []));
  }
  async function refresh() {
    try { job = (await api('GET', base, undefined, { signal: ctl.signal })).data; renderJob(); } catch (err) {
      if (ctl.signal.aborted) return;
      status.replaceChildren(errorBox(err));
    }
  }
  // Events come faster than the job needs reading: one read per 300 ms.
  function refreshSoon() {
    if (refreshPending) return;
    refreshPending = true;
    timers.push(setTimeout(() => { refreshPending = false; refresh(); }, 300));
  }
  function onEvent(ev) {
    if (ev.seq) lastSeq = Math.max(lastSeq, ev.seq);
    if (ev.stage === 'crawl' && ev.total) setBar(ev.current || 0, ev.total);
    // Fallbacks, warnings and errors, in the words of the phase that met them.
    if (['fallback', 'warning', 'error'].includes(ev.status)) {
      if (warnings.querySelector('li.hint')) warnings.replaceChildren();
      warnings.append(h('li', { class: ev.status === 'error' ? 'error' : 'warn', text: `${ev.stage || ''}: ${ev.message || ''}` }));
    }
    log.append(h('li', { text: `${fmtTime(ev.time)} ${ev.stage || ev.type || ''} ${ev.status || ''} ${ev.message || ''}` }));
    refreshSoon();
  }

  const later = (fn, ms) => timers.push(setTimeout(fn, ms));
  const follow = () => followEvents({ base, ctl, later, log, onEvent, refresh,
    seq: () => lastSeq, setSeq: (n) => { lastSeq = n; }, done: () => job && TERMINAL.includes(job.status) });

  async function loadReport() {
    try {
      const { data } = await api('GET', base + '/report', undefined, { signal: ctl.signal });
      report.replaceChildren(...renderReport(data));
      announce('The report is ready');
    } catch (err) {
      if (!ctl.signal.aborted) report.replaceChildren(h('h2', { text: 'Report' }), h('p', { class: 'hint', text: err.message }));
    }
    // What the job's sandbox left in its artifacts folder, kept by its
    // cleanup; most jobs keep none, and then nothing is shown.
    try {
      const { data } = await api('GET', base + '/artifacts', undefined, { signal: ctl.signal });
      if (data.artifacts.length) kept.render(data.artifacts, []); else kept.none();
    } catch (err) { if (!ctl.signal.aborted) { kept.list.replaceChildren(h('h2', { text: 'Artifacts' }), errorBox(err)); kept.none(); } }
  }

  show('Job ' + id, status, cancel, h('h2', { text: 'Steps' }), steps,
    h('label', { for: 'crawl-bar', text: 'Crawl progress' }), bar, barText, notes,
    h('h2', { text: 'Warnings' }), warnings, usage, report, kept.list, kept.viewer,
    h('details', {}, h('summary', { text: 'Event log' }), log));
  refresh().then(() => follow());
}

// artifactsBox lists the files a job kept and shows one at a time. An
// artifact needs the token, which a link cannot carry: it is fetched,
// shown when it is text, and offered to save from memory.
function artifactsBox(ctl) {
  // Busy until the list is known, which may be to show nothing.
  const list = h('section', { id: 'artifacts-list', 'aria-label': 'Artifacts', 'aria-busy': 'true' });
  const viewer = h('section', { id: 'artifact', 'aria-live': 'polite', tabindex: '-1' });
  let saved = null;
  async function open(a) {
    try {
      const res = await fetch(a.url.replace(/^\//, ''), { headers: { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN) }, signal: ctl.signal });
      if (!res.ok) throw new APIError(res.status, await res.json().catch(() => null));
      const blob = await res.blob();
      if (saved) URL.revokeObjectURL(saved);
      saved = URL.createObjectURL(blob);
      const text = /^text\/|^application\/json/.test(a.content_type) ? await blob.text() : null;
      viewer.replaceChildren(h('h2', { text: 'Artifact ' + a.path }),
        h('p', {}, h('a', { id: 'artifact-save', href: saved, download: a.path.split('/').pop(), text: 'Save ' + a.path })),
        text === null ? h('p', { class: 'hint', text: `${a.content_type}, ${a.size} bytes: not shown here` }) : h('pre', { id: 'artifact-text', class: 'out', text }));
      viewer.focus();
    } catch (err) { if (!ctl.signal.aborted) viewer.replaceChildren(errorBox(err)); }
  }
  function render(items, skipped) {
    const out = [h('h2', { text: 'Artifacts' })];
    out.push(items.length ? h('ul', { id: 'artifacts' }, ...items.map((a) => h('li', {},
      h('button', { type: 'button', class: 'link', 'data-path': a.path, text: a.path, onclick: () => open(a) }),
      h('span', { class: 'hint', text: ` ${a.content_type}, ${a.size} bytes` })))) : h('p', { class: 'hint', text: 'None.' }));
    if (skipped.length) out.push(h('p', { class: 'warn', text: 'Not kept: ' + skipped.map((x) => `${x.path} (${x.reason})`).join(', ') }));
    list.replaceChildren(...out);
    list.removeAttribute('aria-busy');
  }
  return { list, viewer, render, none: () => list.removeAttribute('aria-busy'), revoke: () => { if (saved) URL.revokeObjectURL(saved); } };
}

// usageText says in a line what a run used and cost; bytes out only where
// measured.
function usageText(u, cost) {
  if (!u) return '—';
  const secs = (u.sandbox_seconds || []).reduce((n, s) => n + s.seconds, 0);
  const tokens = (u.tokens || []).reduce((n, t) => n + t.input + t.output + (t.cache_read || 0) + (t.cache_write || 0), 0);
  const parts = [`${secs.toFixed(0)} sandbox s`, `${u.execs} execs`, `${tokens} tokens`];
  if (u.bytes_out !== undefined) parts.push(`${u.bytes_out} bytes out`);
  if (cost) parts.push(`${cost.total.toFixed(4)} ${cost.currency}`);
  return parts.join(', ');
}

// ---- an agent run: its events live, the answer, the artifacts ----
function agentRunPage(id) {
  const base = 'v1/agent-runs/' + encodeURIComponent(id);
  const ctl = new AbortController();
  let timers = [];
  const kept = artifactsBox(ctl);
  stop = () => { ctl.abort(); timers.forEach(clearTimeout); timers = []; kept.revoke(); };
  const status = h('p', { id: 'job-status' });
  const info = h('dl', { id: 'run-info', class: 'kv' });
  const cancel = h('button', { type: 'button', class: 'danger', id: 'cancel', text: 'Cancel run' });
  const notes = h('div', { id: 'notes' });
  const events = h('ol', { id: 'run-events', class: 'events' });
  const result = h('section', { id: 'result', 'aria-label': 'Result' });
  let run = null, lastSeq = 0, resultShown = false, refreshPending = false;

  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try { await api('POST', base + '/cancel'); announce('Cancel requested'); refresh(); } catch (err) { notes.replaceChildren(errorBox(err)); cancel.disabled = false; }
  });
  function render() {
    status.replaceChildren('Status: ', badge(run.status), run.cancel_requested && run.status !== 'cancelled' ? ' (cancel requested)' : '',
      run.error ? h('span', { class: 'error', text: ' ' + run.error }) : '');
    info.replaceChildren(...[['Agent', run.agent], ['Sandbox', run.sandbox_id || '—'], ['Time limit', run.timeout_seconds + ' s'],
      ['Budget', run.budget ? run.budget.max_sandbox_seconds + ' sandbox s' : '—'],
      ['Started', fmtTime(run.created_at)], ['Finished', fmtTime(run.finished_at)], ['Usage', usageText(run.usage, run.cost)]]
      .flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })]));
    notes.replaceChildren(...((run.fallbacks || []).length ? [h('p', { class: 'warn' }, 'Fallbacks: ', run.fallbacks.join(', '))] : []));
    cancel.hidden = TERMINAL.includes(run.status) || run.cancel_requested;
    if (TERMINAL.includes(run.status) && !resultShown) { resultShown = true; loadResult(); }
  }
  async function refresh() {
    try { run = (await api('GET', base, undefined, { signal: ctl.signal })).data; render(); } catch (err) {
      if (!ctl.signal.aborted) status.replaceChildren(errorBox(err));
    }
  }
  function onEvent(ev) {
    if (ev.seq) lastSeq = Math.max(lastSeq, ev.seq);
    const type = ev.type || '';
    events.append(h('li', { 'data-type': type, class: type.startsWith('job.') || type === 'sandbox.terminated' ? 'end' : null },
      h('span', { class: 'hint', text: fmtTime(ev.time) + ' ' }), h('strong', { text: type }), ' ' + (ev.message || '')));
    if (refreshPending) return;
    refreshPending = true;
    timers.push(setTimeout(() => { refreshPending = false; refresh(); }, 300));
  }
  async function loadResult() {
    try {
      const { data } = await api('GET', base + '/result', undefined, { signal: ctl.signal });
      const out = [h('h2', { text: data.complete ? 'Answer' : 'Answer (partial: the run did not finish, this is what it printed until then)' }),
        h('div', { class: 'report', id: 'answer' }, ...markdown(data.answer || '', new Map())),
        h('p', { class: 'hint', id: 'exit', text: `Exit status ${data.exit_code === null ? '—' : data.exit_code}${data.timed_out ? ', timed out' : ''}` }),
        kept.list];
      kept.render(data.artifacts, data.skipped);
      result.replaceChildren(...out);
      announce('The result is ready');
    } catch (err) {
      if (!ctl.signal.aborted) result.replaceChildren(h('h2', { text: 'Answer' }), h('p', { class: 'hint', text: err.message }));
    }
  }

  show('Agent run ' + id, status, cancel, notes, info, h('h2', { text: 'Events' }), events, result, kept.viewer);
  const later = (fn, ms) => timers.push(setTimeout(fn, ms));
  refresh().then(() => followEvents({ base, ctl, later, log: events, onEvent, refresh,
    seq: () => lastSeq, setSeq: (n) => { lastSeq = n; }, done: () => run && TERMINAL.includes(run.status) }));
}

// followEvents reads a job's events (o.base + '/events') and hands each to
// o.onEvent until the job has ended. The stream is read with fetch, not
// EventSource: EventSource cannot send an Authorization header, and the
// token must not go in the URL (it would land in logs and history). On a
// dropped stream it reconnects with Last-Event-ID; where the server does
// not stream (API Gateway buffers whole answers) it polls pages of events
// instead.
async function followEvents(o) {
  const wait = (ms) => new Promise((r) => o.later(r, ms));
  async function poll() {
    while (!o.ctl.signal.aborted) {
      try {
        const { data } = await api('GET', `${o.base}/events?after=${o.seq()}&limit=100`, undefined, { signal: o.ctl.signal });
        data.events.forEach(o.onEvent);
        o.setSeq(data.next_after);
        if (!data.events.length && o.done()) return;
      } catch (err) { if (o.ctl.signal.aborted) return; }
      await wait(2000);
      await o.refresh();
    }
  }
  let delay = 2000;
  while (!o.ctl.signal.aborted) {
    try {
      const headers = { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN), Accept: 'text/event-stream' };
      if (o.seq()) headers['Last-Event-ID'] = String(o.seq());
      const res = await fetch(o.base + '/events', { headers, signal: o.ctl.signal });
      if (res.status === 401) return signOut('Your token was refused; sign in again.');
      if (!res.ok) throw new APIError(res.status, await res.json().catch(() => null));
      if (!(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) { await res.body.cancel(); return poll(); }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, i); buf = buf.slice(i + 2);
          const f = { event: 'message', data: [] };
          for (const line of frame.split('\n')) {
            if (line.startsWith(':')) continue;
            const [k, ...rest] = line.split(':');
            const v = rest.join(':').replace(/^ /, '');
            if (k === 'data') f.data.push(v); else if (k === 'retry') delay = Number(v) || delay; else f[k] = v;
          }
          if (!f.data.length) continue;
          const data = JSON.parse(f.data.join('\n'));
          if (f.event === 'end') { await o.refresh(); return; }
          o.onEvent(data);
        }
      }
    } catch (err) {
      if (o.ctl.signal.aborted) return;
      o.log.append(h('li', { class: 'warn', text: 'stream interrupted: ' + err.message + '; reconnecting' }));
    }
    await wait(delay);
  }
}

// ---- the report: Markdown, citations that jump to the sources ----
function renderReport(rep) {
  const md = rep.markdown || '';
  const cut = md.search(/^## Sources\s*$/m);
  const body = cut >= 0 ? md.slice(0, cut) : md;
  const byN = new Map(rep.sources.map((s) => [s.n, s]));
  const out = [h('h2', { text: rep.complete ? 'Report' : 'Report (partial)' }), h('div', { class: 'report', id: 'report-body' }, ...markdown(body, byN))];
  out.push(h('h2', { text: 'Sources', id: 'sources' }), h('ol', { class: 'sources', id: 'source-list' }, ...rep.sources.map((s) =>
    h('li', { id: 'src-' + s.n, value: String(s.n), tabindex: '-1' },
      h('a', { href: safeURL(s.url), target: '_blank', rel: 'noopener noreferrer', class: 'source-link', text: s.title || s.url }),
      h('span', { class: 'hint', text: ` ${s.url} · ${s.mode}, ${s.chars} characters${s.truncated ? ' (shortened)' : ''}` })))));
  if (rep.not_used.length) {
    out.push(h('details', {}, h('summary', { text: `Found but not used (${rep.not_used.length})` }),
      h('ul', {}, ...rep.not_used.map((n) => h('li', {}, h('a', { href: safeURL(n.url), target: '_blank', rel: 'noopener noreferrer', text: n.url }), ` ${n.reason}: ${n.message}`)))));
  }
  return out;
}
function safeURL(u) { return /^https?:\/\//i.test(u) ? u : '#'; }
function jumpTo(n) {
  const li = document.getElementById('src-' + n);
  if (!li) return;
  document.querySelectorAll('ol.sources li.hit').forEach((x) => x.classList.remove('hit'));
  li.classList.add('hit'); li.scrollIntoView({ block: 'center' }); li.focus();
}

// A small Markdown reader for what reports hold: headings, paragraphs,
// lists, code blocks, emphasis, code, links and [n] citations. Text is
// only ever set as text, never parsed as HTML.
function markdown(src, sources) {
  const blocks = [];
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  let para = [], list = null;
  const flush = () => {
    if (para.length) { blocks.push(h('p', {}, ...inline(para.join(' '), sources))); para = []; }
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if (line.startsWith('```')) {
      flush();
      const code = [];
      while (++i < lines.length && !lines[i].startsWith('```')) code.push(lines[i]);
      blocks.push(h('pre', {}, h('code', { text: code.join('\n') })));
    } else if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
      flush();
      blocks.push(h('h' + Math.min(6, m[1].length + 1), {}, ...inline(m[2], sources)));
    } else if ((m = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/.exec(line))) {
      if (para.length) flush();
      const tag = m[1] ? 'ol' : 'ul';
      if (!list || list.tagName.toLowerCase() !== tag) { list = h(tag); blocks.push(list); }
      list.append(h('li', {}, ...inline(m[2], sources)));
    } else if (/^\s*>\s?/.test(line)) {
      flush();
      blocks.push(h('blockquote', {}, ...inline(line.replace(/^\s*>\s?/, ''), sources)));
    } else if (!line.trim()) {
      flush();
    } else if (list && /^\s+/.test(line)) {
      list.lastChild.append(' ', ...inline(line.trim(), sources));
    } else {
      list = null; para.push(line.trim());
    }
  }
  flush();
  return blocks;
}
function inline(text, sources) {
  const out = [];
  const re = /\\([\\`*_{}[\]()#+\-.!<>|~])|`([^`]+)`|\*\*([^*]+)\*\*|\*([^*]+)\*|_([^_]+)_|\[([^\]]+)\]\(<?([^)>\s]+)>?\)|\[(\d+(?:\s*,\s*\d+)*)\]/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) out.push(text.slice(last, m.index));
    last = re.lastIndex;
    if (m[1]) out.push(m[1]);
    else if (m[2]) out.push(h('code', { text: m[2] }));
    else if (m[3]) out.push(h('strong', {}, ...inline(m[3], sources)));
    else if (m[4] || m[5]) out.push(h('em', {}, ...inline(m[4] || m[5], sources)));
    else if (m[6]) out.push(h('a', { href: safeURL(m[7]), target: '_blank', rel: 'noopener noreferrer' }, ...inline(m[6], sources)));
    else if (m[8]) {
      m[8].split(',').map((x) => Number(x.trim())).forEach((n) => {
        const s = sources.get(n);
        if (!s) { out.push(`[${n}]`); return; }
        out.push(h('a', { class: 'cite', href: safeURL(s.url), 'data-n': String(n), 'aria-label': `source ${n}: ${s.title || s.url}`,
          onclick: (ev) => { ev.preventDefault(); jumpTo(n); }, text: `[${n}]` }));
      });
    }
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

// ---- sessions: a code box, a language, the output, the expiry ----
async function sessionsPage() {
  const sid = h('input', { id: 'sid', value: 'console-' + Math.random().toString(36).slice(2, 8), autocomplete: 'off' });
  const lang = h('select', { id: 'language' }, ...['python', 'javascript', 'typescript', 'shell'].map((l) => h('option', { value: l, text: l })));
  const code = h('textarea', { id: 'code', class: 'code', spellcheck: 'false' });
  const out = h('pre', { id: 'output', class: 'out', 'aria-live': 'polite' });
  const info = h('dl', { id: 'session-info', class: 'kv' });
  const list = h('ul', { id: 'session-list' });
  const run = h('button', { type: 'submit', text: 'Run' });
  const del = h('button', { type: 'button', class: 'danger', text: 'Delete session' });
  function showSession(s) {
    info.replaceChildren(...[['Session', s.session_id], ['State', s.state], ['Volume', s.volume.slug + ' at ' + s.volume.mount_path],
      ['Expires', fmtTime(s.expires_at)], ['Last used', fmtTime(s.last_accessed_at)]].flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })]));
  }
  function showRun(r) {
    const parts = [`status: ${r.status}`];
    if (r.exit_code !== undefined) parts.push(`exit code: ${r.exit_code}, ${r.duration_ms} ms${r.timed_out ? ', timed out' : ''}${r.oom ? ', out of memory' : ''}`);
    if (r.stdout) parts.push('--- stdout\n' + r.stdout);
    if (r.stderr) parts.push('--- stderr\n' + r.stderr);
    if (r.result !== undefined && r.result !== null) parts.push('--- result\n' + JSON.stringify(r.result, null, 2));
    if (r.error) parts.push('--- error\n' + r.error);
    out.textContent = parts.join('\n');
  }
  async function loadList() {
    try {
      const { data } = await api('GET', 'v1/sessions?limit=50');
      list.replaceChildren(...data.sessions.map((s) => h('li', {}, h('button', { type: 'button', class: 'link', text: s.session_id,
        onclick: () => { sid.value = s.session_id; loadSession(); } }), ` ${s.state}, expires ${fmtTime(s.expires_at)}`)));
      if (!data.sessions.length) list.replaceChildren(h('li', { text: 'No sessions yet.' }));
    } catch (err) { list.replaceChildren(h('li', {}, errorBox(err))); }
  }
  async function loadSession() {
    try { showSession((await api('GET', 'v1/sessions/' + encodeURIComponent(sid.value))).data); } catch (err) { info.replaceChildren(h('dd', {}, errorBox(err))); }
  }
  const form = h('form', { id: 'run-form' },
    h('div', { class: 'row' }, h('div', {}, h('label', { for: 'sid', text: 'Session id' }), sid), h('div', {}, h('label', { for: 'language', text: 'Language' }), lang)),
    h('label', { for: 'code', text: 'Code' }), code, run, ' ', del);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    run.disabled = true; out.textContent = 'running…';
    try {
      let { data } = await api('POST', `v1/sessions/${encodeURIComponent(sid.value)}/run`, { code: code.value, language: lang.value });
      for (let i = 0; data.status === 'running' && i < 600; i++) {
        await new Promise((r) => setTimeout(r, 1000));
        data = (await api('GET', data.links.self.replace(/^\//, ''))).data;
      }
      showRun(data); loadSession(); loadList();
    } catch (err) { out.replaceChildren(errorBox(err)); }
    run.disabled = false;
  });
  del.addEventListener('click', async () => {
    try { showSession((await api('DELETE', 'v1/sessions/' + encodeURIComponent(sid.value))).data); loadList(); } catch (err) { out.replaceChildren(errorBox(err)); }
  });
  show('Sessions', form, h('h2', { text: 'Output' }), out, h('h2', { text: 'Session' }), info, h('h2', { text: 'Your sessions' }), list);
  await loadList();
}

// ---- routing ----
function route() {
  stop(); stop = () => {};
  const signedIn = !!sessionStorage.getItem(TOKEN);
  $('#signin').hidden = signedIn; $('#view').hidden = !signedIn; $('#nav').hidden = !signedIn;
  if (!signedIn) { $('#token').focus(); return; }
  const hash = location.hash.replace(/^#/, '') || '/';
  let m;
  if ((m = /^\/jobs\/([^/]+)$/.exec(hash))) jobPage(decodeURIComponent(m[1]));
  else if ((m = /^\/agent-runs\/([^/]+)$/.exec(hash))) agentRunPage(decodeURIComponent(m[1]));
  else if (hash === '/sessions') sessionsPage();
  else jobsPage();
  $('#main').focus({ preventScroll: true });
}

document.addEventListener('DOMContentLoaded', () => {
  $('#signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const tok = $('#token').value.trim();
    sessionStorage.setItem(TOKEN, tok);
    $('#token').value = '';
    try {
      await api('GET', 'v1/jobs?limit=1');
      $('#signin-error').textContent = '';
      route();
    } catch (err) { if (err.status !== 401) $('#signin-error').textContent = err.message; }
  });
  $('#signout').addEventListener('click', () => signOut(''));
  window.addEventListener('hashchange', route);
  route();
});
})();
