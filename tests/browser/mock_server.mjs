// A stand-in for `qvl serve` with the same HTTP contract, for the browser tests until (and besides)
// the real server: serves web/ from disk and answers the OpenAI-style API with canned, slowly
// streamed answers.
//
//   node mock_server.mjs [--port N]      prints "listening PORT" once ready
//
// API (the contract the page is written against):
//   GET  /health                 200 {"status":"ok"} (503 while "loading")
//   GET  /v1/models              {"object":"list","data":[{"id":...}]}
//   POST /v1/chat/completions    stream:true → SSE "data: {chat.completion.chunk}" lines, the last
//                                chunk carrying usage + timings, then "data: [DONE]"; errors as
//                                {"error":{"message","type","code"}} with 400/413/503 (+Retry-After)
// Test controls (not part of qvl):
//   POST /__mock/next   {"status":503,"retry_after":5,"message":"..."} or {"answer":"grounding"|"slow"|"text"}
//                       (+ "reasoning": "...": streamed first as delta.reasoning_content, as a
//                       reasoning model's server does)
//                       applies to the next completion request only (a queue, one entry per request)
//   POST /__mock/reset  clears the recorded requests, counters and queued behaviours
//   GET  /__mock/state  {"requests":[bodies...],"cancelled":N,"completed":N}
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const WEB = path.resolve(here, '../../web');
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.md': 'text/markdown; charset=utf-8',
  '.LICENSE': 'text/plain; charset=utf-8',
};
const MODEL = 'qwen3-vl-2b-instruct (mock)';
// The page is served under the same Content-Security-Policy that qvl sends (src/server/http/web_assets.h),
// so a change to the page that the policy would block fails these tests.
const CSP = (() => {
  const h = fs.readFileSync(path.resolve(here, '../../src/server/http/web_assets.h'), 'utf8');
  const m = h.match(/#define WEB_ASSETS_CSP((?:[^\n]*\\\n)*[^\n]*)/);
  if (!m) throw new Error('WEB_ASSETS_CSP not found in src/server/http/web_assets.h');
  return [...m[1].matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((x) => x[1]).join('');
})();
const MAX_BODY = 64 * 1024 * 1024;

// Canned answers. GROUNDING's boxes match the synthetic scene the tests draw (see run.mjs).
export const ANSWERS = {
  text:
    'The picture is a **synthetic test scene** on a soft blue background. It shows three shapes:\n\n' +
    '| Shape | Colour | Where |\n|---|---|---|\n| Circle | red | upper left |\n| Square | blue | centre |\n' +
    '| Triangle | green | lower right |\n\nA small yellow *sun* sits in the top right corner.',
  grounding:
    'Here are the objects I found:\n\n```json\n[\n' +
    '  {"bbox_2d": [125, 160, 325, 480], "label": "red circle"},\n' +
    '  {"bbox_2d": [425, 360, 625, 680], "label": "blue square"},\n' +
    '  {"bbox_2d": [750, 400, 950, 840], "label": "green triangle"},\n' +
    '  {"point_2d": [875, 180], "label": "sun"}\n]\n```',
  // For "Extract as table" (response_format json_schema): cells with a comma, a quote, a newline
  // and markup, so the tests see CSV quoting and that model text never becomes HTML.
  table: JSON.stringify({ rows: [
    { Item: 'Apples, red', Price: '1.20' },
    { Item: 'Say "cheese"', Price: '<b>3</b>' },
    { Item: 'Two\nlines', Price: '' },
  ] }),
  followup: 'Yes — the **red circle** is the largest round shape, and it is left of the blue square.',
  slow:
    'This answer streams slowly so that it can be stopped. ' +
    Array.from({ length: 60 }, (_, i) => `Word${i + 1}`).join(' ') +
    '.',
};

// Splits text into small pieces like a tokenizer would (words with their leading space, punctuation).
function tokens(text) {
  return text.match(/\s*[\w'’*#|-]+|\s*[^\w\s]|\s+/g) ?? [];
}

const state = { requests: [], cancelled: 0, completed: 0, next: [], loading: false };

function sendJSON(res, status, obj, headers = {}) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
}
function sendError(res, status, message, type, code, headers) {
  sendJSON(res, status, { error: { message, type, code } }, headers);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > MAX_BODY) {
        reject(Object.assign(new Error('body too large'), { status: 413 }));
        req.destroy();
      } else parts.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}

// The page's third-party scripts, which the build embeds from Debian's packages: URL path -> file.
const VENDOR = new Map(
  fs
    .readFileSync(path.resolve(here, '../../tools/web_vendor.txt'), 'utf8')
    .split('\n')
    .filter((l) => l.trim() && !l.startsWith('#'))
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f.length === 3)
    .map(([url, file]) => [url, file]),
);

function serveStatic(req, res) {
  let p = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  if (p === '/') p = '/index.html';
  const file = VENDOR.get(p) ?? path.resolve(WEB, '.' + p);
  if (!VENDOR.has(p) && !file.startsWith(WEB + path.sep)) return sendError(res, 404, 'not found', 'not_found', 'not_found');
  fs.readFile(file, (err, data) => {
    if (err) return sendError(res, 404, `no file ${p}`, 'not_found', 'not_found');
    const ext = path.extname(file) || path.basename(file);
    res.writeHead(200, {
      'Content-Type': TYPES[ext] ?? TYPES[path.extname(file)] ?? 'application/octet-stream',
      'Cache-Control': 'no-cache',
      'Content-Security-Policy': CSP,
      'X-Content-Type-Options': 'nosniff',
    });
    res.end(data);
  });
}

// What qvl's "boxes" extension returns for an answer: its bbox_2d / point_2d objects in pixels of the
// last image (the size from a PNG data URL's header), as the server attributes a single list.
function pngSize(url) {
  const m = /^data:image\/png;base64,(.{0,64})/.exec(url ?? '');
  if (!m) return null;
  const b = Buffer.from(m[1], 'base64');
  return b.length >= 24 ? [b.readUInt32BE(16), b.readUInt32BE(20)] : null;
}

export function mockBoxes(text, messages) {
  const urls = [];
  for (const m of messages) if (Array.isArray(m.content)) for (const c of m.content) if (c.type === 'image_url') urls.push(c.image_url?.url);
  const size = urls.length ? pngSize(urls[urls.length - 1]) : null;
  if (!size) return [];
  const [w, h] = size;
  const r = (v) => Math.round(v * 10) / 10;
  const out = [];
  for (const s of text.match(/\{[^{}]*\}/g) ?? []) {
    let o;
    try { o = JSON.parse(s); } catch { continue; }
    const image = urls.length - 1;
    if (Array.isArray(o.bbox_2d)) out.push({ image, label: o.label ?? '', box: o.bbox_2d.map((v, i) => r((v / 1000) * (i % 2 ? h : w))) });
    else if (Array.isArray(o.point_2d)) out.push({ image, label: o.label ?? '', point: o.point_2d.map((v, i) => r((v / 1000) * (i % 2 ? h : w))) });
  }
  return out;
}

function countImages(messages) {
  let n = 0;
  for (const m of messages) if (Array.isArray(m.content)) for (const c of m.content) if (c.type === 'image_url') n++;
  return n;
}

async function completions(req, res) {
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch (e) {
    if (e.status === 413) return sendError(res, 413, 'request body is larger than 64 MiB', 'invalid_request_error', 'body_too_large');
    return sendError(res, 400, 'request body is not valid JSON', 'invalid_request_error', 'bad_json');
  }
  if (!body || !Array.isArray(body.messages) || body.messages.length === 0)
    return sendError(res, 400, "'messages' must be a non-empty array", 'invalid_request_error', 'bad_messages');
  state.requests.push(body);
  const next = state.next.shift() ?? {};
  if (next.status) {
    const headers = next.retry_after != null ? { 'Retry-After': String(next.retry_after) } : {};
    return sendError(res, next.status, next.message ?? `mock error ${next.status}`, next.type ?? 'server_error', next.code ?? 'mock', headers);
  }
  if (state.loading) return sendError(res, 503, 'the model is still loading', 'server_error', 'loading');

  const users = body.messages.filter((m) => m.role === 'user');
  const lastUser = users[users.length - 1];
  const lastText = Array.isArray(lastUser?.content) ? lastUser.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ') : String(lastUser?.content ?? '');
  let kind = next.answer;
  if (!kind) kind = /locate|bbox|find/i.test(lastText) ? 'grounding' : users.length > 1 ? 'followup' : 'text';
  const text = ANSWERS[kind] ?? ANSWERS.text;
  const delay = next.delay_ms ?? (kind === 'slow' ? 150 : 25);
  const toks = tokens(text);
  const maxTok = Number.isInteger(body.max_tokens) && body.max_tokens > 0 ? body.max_tokens : Infinity;
  const n = Math.min(toks.length, maxTok);
  const nImages = countImages(body.messages);
  const imageTokens = nImages * 400;
  const textChars = body.messages.reduce((n, m) => n + (typeof m.content === 'string' ? m.content.length : (m.content ?? []).reduce((k, c) => k + (c.text?.length ?? 0), 0)), 0);
  const promptTokens = 20 + imageTokens + textChars / 4;

  const id = `chatcmpl-mock${state.requests.length}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta, finish = null, extra = {}) => ({ id, object: 'chat.completion.chunk', created, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }], ...extra });

  if (body.stream !== true) {
    return sendJSON(res, 200, {
      id, object: 'chat.completion', created, model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: toks.slice(0, n).join(''), ...(next.reasoning ? { reasoning_content: next.reasoning } : {}), ...(body.boxes === true ? { boxes: mockBoxes(toks.slice(0, n).join(''), body.messages) } : {}) }, finish_reason: n < toks.length ? 'length' : 'stop' }],
      usage: { prompt_tokens: Math.round(promptTokens), completion_tokens: n, total_tokens: Math.round(promptTokens) + n },
    });
  }

  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
  let closed = false;
  res.on('close', () => {
    if (!res.writableFinished) {
      closed = true;
      state.cancelled++;
    }
  });
  const write = (obj) => res.write(`data: ${typeof obj === 'string' ? obj : JSON.stringify(obj)}\n\n`);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const t0 = Date.now();
  await sleep(120); // "prefill"
  if (closed) return;
  write(chunk({ role: 'assistant', content: '' }));
  const tFirst = Date.now();
  for (const piece of next.reasoning ? tokens(next.reasoning) : []) {
    if (closed) return;
    write(chunk({ reasoning_content: piece }));
    await sleep(delay);
  }
  for (let i = 0; i < n; i++) {
    if (closed) return;
    write(chunk({ content: toks[i] }));
    await sleep(delay);
  }
  if (closed) return;
  // {"tool_calls":[{name, arguments}]} in /__mock/next: streamed as OpenAI does, id + name first,
  // then the arguments in two fragments.
  for (const [index, tc] of (next.tool_calls ?? []).entries()) {
    const a = JSON.stringify(tc.arguments ?? {});
    write(chunk({ tool_calls: [{ index, id: `call_mock${index}`, type: 'function', function: { name: tc.name, arguments: '' } }] }));
    write(chunk({ tool_calls: [{ index, function: { arguments: a.slice(0, 5) } }] }));
    write(chunk({ tool_calls: [{ index, function: { arguments: a.slice(5) } }] }));
  }
  if (body.boxes === true) write(chunk({ boxes: mockBoxes(toks.slice(0, n).join(''), body.messages) }));
  const tEnd = Date.now();
  const prompt = Math.round(promptTokens);
  write(
    chunk({}, next.tool_calls ? 'tool_calls' : n < toks.length ? 'length' : 'stop', {
      usage: { prompt_tokens: prompt, completion_tokens: n, total_tokens: prompt + n },
      timings: {
        ttft_ms: tFirst - t0,
        prefill_tok_s: (prompt * 1000) / Math.max(1, tFirst - t0),
        decode_tok_s: (n * 1000) / Math.max(1, tEnd - tFirst),
        image_tokens: imageTokens,
        vision_ms: imageTokens && users.length === 1 ? 40 : 0,
        preprocess_ms: imageTokens ? 2 : 0,
        prefill_ms: Math.max(1, tFirst - t0) - (imageTokens && users.length === 1 ? 40 : 0),
        decode_ms: tEnd - tFirst,
        queue_ms: 0,
        image_cache_hit: users.length > 1,
        // As qvl serve: any earlier request left the template header (3 tokens) in the prefix
        // cache, so a first question "hits" too; a follow-up reuses its earlier turns.
        prefix_cache_hit: state.requests.length > 1,
        cached_prompt_tokens: users.length > 1 ? prompt - 12 : state.requests.length > 1 ? 3 : 0,
      },
    }),
  );
  write('[DONE]');
  state.completed++;
  res.end();
}

const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'GET' && url.pathname === '/health')
      return state.loading ? sendError(res, 503, 'loading model', 'server_error', 'loading', { 'Retry-After': '2' }) : sendJSON(res, 200, { status: 'ok' });
    if (req.method === 'GET' && url.pathname === '/v1/models')
      return sendJSON(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model', created: 0, owned_by: 'qvl' }] });
    if (url.pathname === '/v1/chat/completions') {
      if (req.method !== 'POST') return sendError(res, 405, 'use POST', 'invalid_request_error', 'method');
      return await completions(req, res);
    }
    if (url.pathname === '/__mock/next' && req.method === 'POST') {
      state.next.push(JSON.parse(await readBody(req)));
      return sendJSON(res, 200, { queued: state.next.length });
    }
    if (url.pathname === '/__mock/reset' && req.method === 'POST') {
      Object.assign(state, { requests: [], cancelled: 0, completed: 0, next: [], loading: false });
      return sendJSON(res, 200, { ok: true });
    }
    if (url.pathname === '/__mock/loading' && req.method === 'POST') {
      state.loading = JSON.parse(await readBody(req)).loading === true;
      return sendJSON(res, 200, { loading: state.loading });
    }
    if (url.pathname === '/__mock/state') return sendJSON(res, 200, { requests: state.requests, cancelled: state.cancelled, completed: state.completed });
    if (req.method === 'GET') return serveStatic(req, res);
    return sendError(res, 404, 'not found', 'not_found', 'not_found');
  } catch (e) {
    if (!res.headersSent) sendError(res, 500, String(e.message ?? e), 'server_error', 'mock');
    else res.end();
  }
});

const argPort = process.argv.indexOf('--port');
const port = argPort > 0 ? Number(process.argv[argPort + 1]) : 0;
server.listen(port, '127.0.0.1', () => {
  console.log(`listening ${server.address().port}`);
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
