// Pure helpers of the qvl web UI: no DOM, no network, so the browser tests can call them directly
// (tests/browser) and compare them with the fixtures.

// ---- Image size → tokens (qwen3vl-spec.md §3.2) -------------------------------------------------

export const PATCH_FACTOR = 32; // patch 16 × spatial merge 2: one LLM token per 32×32 pixels
export const DEFAULT_MIN_PIXELS = 65536;
export const DEFAULT_MAX_PIXELS = 16777216;

// Python's round(): halves go to the even neighbour (2.5 → 2, 1.5 → 2).
export function roundHalfEven(x) {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

// The size the model sees for an image of height × width pixels, as HF's smart_resize computes it.
// Returns {height, width, tokens} or {error} (aspect ratio above 200).
export function smartResize(height, width, minPixels = DEFAULT_MIN_PIXELS, maxPixels = DEFAULT_MAX_PIXELS) {
  const f = PATCH_FACTOR;
  if (!(height > 0 && width > 0)) return { error: `image size ${width}×${height} is empty` };
  const ratio = Math.max(height, width) / Math.min(height, width);
  if (ratio > 200) return { error: `absolute aspect ratio must be smaller than 200, got ${ratio.toFixed(1)}` };
  let h = roundHalfEven(height / f) * f;
  let w = roundHalfEven(width / f) * f;
  if (h * w > maxPixels) {
    const beta = Math.sqrt((height * width) / maxPixels);
    h = Math.max(f, Math.floor(height / beta / f) * f);
    w = Math.max(f, Math.floor(width / beta / f) * f);
  } else if (h * w < minPixels) {
    const beta = Math.sqrt(minPixels / (height * width));
    h = Math.ceil((height * beta) / f) * f;
    w = Math.ceil((width * beta) / f) * f;
  }
  return { height: h, width: w, tokens: (h / f) * (w / f) };
}

// ---- Server-sent events ---------------------------------------------------------------------------

// Feeds text as it arrives; calls onData(dataString) once per event (multi-line data joined by "\n").
// Only "data:" fields matter for the chat API; comments (": ping") and other fields are skipped.
export function createSSEParser(onData) {
  let pending = '';
  let data = [];
  const line = (l) => {
    if (l.endsWith('\r')) l = l.slice(0, -1);
    if (l === '') {
      if (data.length) {
        const d = data.join('\n');
        data = [];
        onData(d);
      }
    } else if (l.startsWith('data:')) {
      data.push(l.startsWith('data: ') ? l.slice(6) : l.slice(5));
    }
  };
  return {
    push(text) {
      pending += text;
      let i;
      while ((i = pending.indexOf('\n')) >= 0) {
        const l = pending.slice(0, i);
        pending = pending.slice(i + 1);
        line(l);
      }
    },
    end() {
      if (pending) line(pending);
      pending = '';
      line('');
    },
  };
}

// ---- Grounding (qwen3vl-spec.md §7) ---------------------------------------------------------------

const MAX_MARKS = 500;

function num(v) {
  const n = typeof v === 'string' ? Number(v) : v;
  return typeof n === 'number' && Number.isFinite(n) ? Math.min(1000, Math.max(0, n)) : null;
}

function labelOf(o) {
  for (const k of ['label', 'text_content', 'name', 'category', 'text']) {
    if (typeof o[k] === 'string' && o[k].trim()) return o[k].trim();
    if (typeof o[k] === 'number') return String(o[k]);
  }
  return '';
}

function collect(v, out, depth = 0) {
  if (out.length >= MAX_MARKS || depth > 8 || v === null || typeof v !== 'object') return;
  if (Array.isArray(v)) {
    for (const x of v) collect(x, out, depth + 1);
    return;
  }
  const b = v.bbox_2d ?? v.bbox;
  if (Array.isArray(b) && b.length === 4) {
    let [x1, y1, x2, y2] = b.map(num);
    if (x1 !== null && y1 !== null && x2 !== null && y2 !== null) {
      if (x2 < x1) [x1, x2] = [x2, x1];
      if (y2 < y1) [y1, y2] = [y2, y1];
      out.push({ kind: 'box', x1, y1, x2, y2, label: labelOf(v) });
      return;
    }
  }
  const p = v.point_2d ?? v.point;
  if (Array.isArray(p) && p.length === 2) {
    const [x, y] = p.map(num);
    if (x !== null && y !== null) {
      out.push({ kind: 'point', x, y, label: labelOf(v) });
      return;
    }
  }
  for (const k of Object.keys(v)) if (typeof v[k] === 'object') collect(v[k], out, depth + 1);
}

// Boxes and points in a model answer, on the 0..1000 grid: [{kind:'box', x1, y1, x2, y2, label} |
// {kind:'point', x, y, label}]. Looks in ```json fences first, then in the whole answer; a list cut
// short (max_tokens, Stop) still gives the objects that were complete.
export function parseGrounding(text) {
  if (typeof text !== 'string' || !/bbox|point/.test(text)) return [];
  const candidates = [];
  const fence = /```[a-zA-Z]*\s*\n([\s\S]*?)(```|$)/g;
  let m;
  while ((m = fence.exec(text)) !== null) candidates.push(m[1]);
  candidates.push(text);
  for (const c of candidates) {
    const out = [];
    try {
      collect(JSON.parse(c.trim()), out);
    } catch {
      // Not one JSON value (prose around it, or cut off): take each flat {...} that parses.
      for (const o of c.match(/\{[^{}]*\}/g) ?? []) {
        try {
          collect(JSON.parse(o), out);
        } catch {
          /* not JSON: ignore */
        }
      }
    }
    if (out.length) return out.slice(0, MAX_MARKS);
  }
  return [];
}

// ---- Errors ---------------------------------------------------------------------------------------

// Turns an HTTP failure into what the user should read: {kind, title, detail, retryAfter (s|null)}.
// `error` is the OpenAI error object {message, type, code} if the body had one.
// media: 'video' when the failed request carried a video (a 413 then names videos and their limits).
export function describeHttpError(status, error, retryAfterHeader, media = 'image') {
  const msg = error && typeof error.message === 'string' ? error.message : '';
  let retryAfter = null;
  if (retryAfterHeader != null && retryAfterHeader !== '') {
    const s = Number(retryAfterHeader);
    if (Number.isFinite(s) && s >= 0) retryAfter = Math.min(600, Math.ceil(s));
    else {
      const t = Date.parse(retryAfterHeader);
      if (!Number.isNaN(t)) retryAfter = Math.min(600, Math.max(0, Math.ceil((t - Date.now()) / 1000)));
    }
  }
  switch (status) {
    case 503:
      if (retryAfter !== null)
        return { kind: 'busy', title: 'The server is busy', detail: msg || 'Its request queue is full.', retryAfter };
      // Still loading the model: try again shortly, it will be ready soon.
      return { kind: 'loading', title: 'The server is not ready', detail: msg || 'The model is still loading.', retryAfter: 5 };
    case 413:
      if (media === 'video')
        return { kind: 'video_too_large', title: 'Video too large', detail: (msg ? msg + ' ' : '') + 'Try a shorter or smaller clip.', retryAfter: null };
      return {
        kind: 'too_large',
        title: 'Image too large',
        detail: (msg ? msg + ' ' : '') + 'Try a smaller image, or lower “Max image size” in Settings.',
        retryAfter: null,
      };
    case 429:
      return { kind: 'rate', title: 'Too many requests', detail: msg || 'Slow down a little.', retryAfter };
    case 401:
      return { kind: 'auth', title: 'API key needed', detail: (msg ? msg + ' ' : '') + 'Enter the server’s API key in Settings.', retryAfter: null };
    case 400:
      return { kind: 'bad_request', title: 'The server could not use this request', detail: msg || 'Bad request.', retryAfter: null };
    default:
      return { kind: 'server', title: `Server error (${status})`, detail: msg || 'Something went wrong on the server.', retryAfter };
  }
}

export function describeNetworkError() {
  return {
    kind: 'offline',
    title: 'Can’t reach the qvl server',
    detail: 'Check that “qvl serve” is still running and reachable from this browser, then try again.',
    retryAfter: null,
  };
}

// ---- Requests ---------------------------------------------------------------------------------------

// The OpenAI `messages` array for a conversation: images first, then the text, as Qwen3-VL's chat
// template expects. Failed turns are left out; images that could not be kept (storage full) too.
export function buildMessages(conversation, systemPrompt) {
  const msgs = [];
  if (systemPrompt && systemPrompt.trim()) msgs.push({ role: 'system', content: systemPrompt.trim() });
  for (const m of conversation.messages) {
    if (m.role === 'user') {
      const content = [];
      for (const img of m.images ?? [])
        if (img.dataUrl) content.push(img.kind === 'video' ? { type: 'video_url', video_url: { url: img.dataUrl } } : { type: 'image_url', image_url: { url: img.dataUrl } });
      if (m.text) content.push({ type: 'text', text: m.text });
      if (content.length) msgs.push({ role: 'user', content });
    } else if (m.role === 'assistant' && m.text && !m.error) {
      msgs.push({ role: 'assistant', content: m.text });
    }
  }
  return msgs;
}

export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

// ---- "Extract as table" (response_format json_schema) --------------------------------------------

export const EXTRACT_MAX_COLUMNS = 16;
export const EXTRACT_MAX_ROWS = 50;
export const EXTRACT_MAX_CELL = 200;

// "Item, Price , ,Qty" → ["Item", "Price", "Qty"]: trimmed, empties and repeats dropped, capped.
export function parseColumns(text) {
  const out = [];
  for (const c of String(text ?? '').split(',')) {
    const t = c.trim().slice(0, 64);
    if (t && !out.includes(t)) out.push(t);
  }
  return out.slice(0, EXTRACT_MAX_COLUMNS);
}

// The schema asked for: {"rows": [{<each column>: string}, …]}. Only keywords of the server's
// subset (docs/API.md "Structured output"); the caps keep a looping model from running to
// max_tokens inside one cell or one endless list.
export function extractSchema(columns) {
  const properties = {};
  for (const c of columns) properties[c] = { type: 'string', maxLength: EXTRACT_MAX_CELL };
  return {
    type: 'object',
    properties: {
      rows: {
        type: 'array',
        maxItems: EXTRACT_MAX_ROWS,
        items: { type: 'object', properties, required: [...columns], additionalProperties: false },
      },
    },
    required: ['rows'],
    additionalProperties: false,
  };
}

export function extractResponseFormat(columns) {
  return { type: 'json_schema', json_schema: { name: 'table', strict: true, schema: extractSchema(columns) } };
}

export function extractPrompt(question, columns) {
  const q = String(question ?? '').trim() || 'Extract the table in this image.';
  return `${q}\nAnswer as JSON: {"rows": [...]}, one object per row with the keys ${columns.map((c) => JSON.stringify(c)).join(', ')}.`;
}

// The model's text → {rows: [[cell, …], …]} in column order, or {error} saying what is wrong.
export function parseExtract(text, columns) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return { error: `The answer is not complete JSON (${e.message}).` };
  }
  if (!v || typeof v !== 'object' || !Array.isArray(v.rows)) return { error: 'The answer has no "rows" list.' };
  const rows = [];
  for (const r of v.rows) {
    if (!r || typeof r !== 'object' || Array.isArray(r)) return { error: 'A row is not an object.' };
    rows.push(columns.map((c) => (r[c] === undefined || r[c] === null ? '' : String(r[c]))));
  }
  return { rows };
}

// RFC 4180: every field quoted when it holds a comma, quote, CR or LF; quotes doubled; CRLF rows.
export function csvField(s) {
  const t = String(s);
  return /[",\r\n]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t;
}

export function toCSV(columns, rows) {
  return [columns, ...rows].map((r) => r.map(csvField).join(',')).join('\r\n') + '\r\n';
}

// A tool call's arguments (a JSON string) pretty-printed; left as they are when they do not parse.
export function prettyArguments(args) {
  if (typeof args !== 'string') return JSON.stringify(args ?? {}, null, 2);
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}

// ---- Video clips ---------------------------------------------------------------------------------

// What the server decodes (docs/VIDEO.md "What is accepted"); browsers often give Matroska no type.
export const VIDEO_TYPES = ['video/mp4', 'video/webm', 'video/x-matroska', 'video/quicktime', 'image/gif'];
const VIDEO_EXTENSIONS = /\.(mp4|m4v|webm|mkv|mov|gif)$/i;

export function isVideoFile(type, name) {
  return VIDEO_TYPES.includes(type) || ((!type || type === 'application/octet-stream') && VIDEO_EXTENSIONS.test(name || ''));
}

// Seconds as the frame strip shows them: "0.67 s", "12.5 s", "1:05.0".
// Rounded first, so that 9.999 is "10.0 s" and 59.96 is "1:00.0".
export function formatSeconds(t) {
  const hundredths = Math.round(t * 100);
  if (hundredths < 1000) return `${(hundredths / 100).toFixed(2)} s`;
  const tenths = Math.round(t * 10);
  if (tenths < 600) return `${(tenths / 10).toFixed(1)} s`;
  const m = Math.floor(tenths / 600);
  return `${m}:${((tenths - m * 600) / 10).toFixed(1).padStart(4, '0')}`;
}

// Packed RGB (the server's "rgb24" thumbnails) to the RGBA an ImageData holds.
export function rgbToRgba(rgb, width, height) {
  const out = new Uint8ClampedArray(width * height * 4);
  for (let i = 0, j = 0; i < width * height; i++, j += 3) {
    out[4 * i] = rgb[j];
    out[4 * i + 1] = rgb[j + 1];
    out[4 * i + 2] = rgb[j + 2];
    out[4 * i + 3] = 255;
  }
  return out;
}
