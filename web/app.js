// qvl web UI: talks to the OpenAI-compatible API of `qvl serve` on the same origin.
// Model output is only ever inserted as text nodes or as a DOMPurify-sanitized DOM fragment of
// marked's rendering; no HTML string is built from it here.
import {
  smartResize,
  createSSEParser,
  describeHttpError,
  describeNetworkError,
  buildMessages,
  formatBytes,
  DEFAULT_MIN_PIXELS,
  parseColumns,
  extractResponseFormat,
  extractPrompt,
  parseExtract,
  toCSV,
  prettyArguments,
  isVideoFile,
  formatSeconds,
  rgbToRgba,
} from './lib.js';

const STORE_KEY = 'qvl.conversations.v1';
const SETTINGS_KEY = 'qvl.settings.v1';
const DEFAULTS = Object.freeze({ maxPixels: 1048576, temperature: 0.7, maxTokens: 1024, system: '', apiKey: '' });
const MAX_FILE_BYTES = 32 * 1024 * 1024; // the server's cap on encoded image bytes (docs/IMAGES.md)
const MAX_PENDING = 8;
const THUMB_BOX = { width: 160, height: 90 }; // the frame strip's thumbnails fit in this
const MAX_AUTO_RETRIES = 5;
const ACCEPTED = ['image/png', 'image/jpeg', 'image/webp'];

const PRESETS = {
  describe: { text: 'Describe this image in detail.' },
  ocr: {
    text:
      'Extract all the text in this image, in reading order. Render tables as Markdown tables and keep ' +
      'headings and lists as Markdown.',
  },
  chart: {
    text:
      'Read this chart. Say what kind of chart it is and what the axes and series show, list the values you ' +
      'can read as a Markdown table, then summarise the main trend in one or two sentences.',
  },
  ground: {
    text:
      'Locate every instance of: all objects. Report bounding boxes in JSON format as a list of ' +
      '{"bbox_2d": [x1, y1, x2, y2], "label": "name"}.',
    select: 'all objects',
  },
};

// ---- Small DOM helpers ---------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

// el('div', {class: 'x', text: 'hello', onclick: f, 'aria-label': '…'}, child, …). Children that are
// strings become text nodes.
function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'hidden' || k === 'disabled') e[k] = !!v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

function icon(path) {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  const p = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  p.setAttribute('d', path);
  svg.append(p);
  return svg;
}
const ICON_COPY = 'M9 9h10v11H9zM5 15V4h10';
const ICON_CHECK = 'M5 12.5l4.5 4.5L19 7.5';
const ICON_TRASH = 'M5 7h14M10 7V5h4v2M7 7l1 12h8l1-12';
const ICON_RETRY = 'M4 12a8 8 0 0114-5.3M20 12a8 8 0 01-14 5.3M18 3v4h-4M6 21v-4h4';

function announce(text) {
  const a = $('announcer');
  a.textContent = '';
  // A change the next frame is announced even when the text repeats.
  requestAnimationFrame(() => (a.textContent = text));
}

let toastTimer = null;
function toast(text, action) {
  const t = $('toast');
  t.replaceChildren(el('span', { text }));
  if (action) t.append(el('button', { type: 'button', class: 'link-btn', text: action.label, onclick: () => { t.hidden = true; action.run(); } }));
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), action ? 7000 : 4500);
}

// ---- Settings ------------------------------------------------------------------------------------

function loadSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_KEY) || '{}');
    return { ...DEFAULTS, ...s };
  } catch {
    return { ...DEFAULTS };
  }
}
let settings = loadSettings();
function saveSettings() {
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
  } catch {
    /* storage unavailable (private mode): settings last for this page only */
  }
}
const minPixels = () => Math.min(DEFAULT_MIN_PIXELS, settings.maxPixels);

// ---- Conversations (localStorage) ----------------------------------------------------------------

function loadConversations() {
  try {
    const v = JSON.parse(localStorage.getItem(STORE_KEY) || '[]');
    return Array.isArray(v) ? v.filter((c) => c && Array.isArray(c.messages)) : [];
  } catch {
    return [];
  }
}
let conversations = loadConversations();
let current = null; // the conversation on screen; null until the first message of a new one

// Saves all conversations. When the browser's storage is full, images (the bulk) are left out of the
// stored copy, oldest conversations first, then whole old conversations; what is on screen keeps them.
function saveConversations() {
  conversations.sort((a, b) => b.updated - a.updated);
  const copy = JSON.parse(JSON.stringify(conversations));
  const tryStore = () => {
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify(copy));
      return true;
    } catch {
      return false;
    }
  };
  if (tryStore()) return;
  for (let i = copy.length - 1; i >= 0; i--) {
    for (const m of copy[i].messages) for (const img of m.images ?? []) if (img.dataUrl) { img.dataUrl = null; img.dropped = true; }
    if (tryStore()) {
      toast('Browser storage is full: some images will not be kept after a reload.');
      return;
    }
  }
  while (copy.length > 1) {
    copy.pop();
    if (tryStore()) {
      toast('Browser storage is full: the oldest conversations were not kept.');
      return;
    }
  }
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

function titleFor(msg) {
  const t = (msg.text || '').replace(/\s+/g, ' ').trim();
  if (t) return t.length > 60 ? t.slice(0, 57) + '…' : t;
  return msg.images?.[0]?.name || 'Image question';
}

// ---- Image attachments ---------------------------------------------------------------------------

let pending = []; // [{id, name, type, bytes, dataUrl, width, height}]

function readAsDataURL(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}

async function addFiles(fileList) {
  const files = [...fileList];
  for (const f of files) {
    if (pending.length >= MAX_PENDING) {
      toast(`At most ${MAX_PENDING} images per message.`);
      break;
    }
    if (isVideoFile(f.type, f.name)) {
      addVideo(f);
      continue;
    }
    if (!ACCEPTED.includes(f.type)) {
      toast(`“${f.name || 'pasted file'}” is not a PNG, JPEG or WebP image, nor an MP4, WebM, MKV, MOV or GIF video.`);
      continue;
    }
    if (f.size > MAX_FILE_BYTES) {
      toast(`“${f.name}” is ${formatBytes(f.size)}; images up to ${formatBytes(MAX_FILE_BYTES)} can be sent.`);
      continue;
    }
    try {
      const dataUrl = await readAsDataURL(f);
      const img = new Image();
      img.src = dataUrl;
      await img.decode();
      pending.push({
        id: newId(),
        name: f.name || `pasted-image.${f.type.split('/')[1]}`,
        type: f.type,
        bytes: f.size,
        dataUrl,
        width: img.naturalWidth,
        height: img.naturalHeight,
      });
      announce(`Added image ${f.name || ''}, ${img.naturalWidth} by ${img.naturalHeight} pixels.`);
    } catch {
      toast(`Could not read “${f.name}” as an image.`);
    }
  }
  renderAttachments();
  updateSendState();
}

// ---- Video clips: the server says which frames it samples (POST /video/frames, docs/WEB_UI.md) ----

// A video is sent as the file chosen (a data: URL), like an image; its frame strip comes from the
// server, which samples with the same code and settings as the chat request will, so the strip
// shows the frames the model sees. The server's limits (--max-video-mb, length, codecs) answer
// here first, before any question is asked.
async function addVideo(f) {
  const p = { id: newId(), kind: 'video', name: f.name || 'video', type: f.type || 'video/mp4', bytes: f.size, dataUrl: null, state: 'reading' };
  pending.push(p);
  renderAttachments();
  updateSendState();
  try {
    p.dataUrl = await readAsDataURL(f);
    if (!f.type) p.dataUrl = p.dataUrl.replace(/^data:[^;,]*/, `data:${p.type}`);
    const headers = { 'Content-Type': 'application/json' };
    if (settings.apiKey) headers.Authorization = `Bearer ${settings.apiKey}`;
    let res;
    try {
      res = await fetch('video/frames', { method: 'POST', headers, body: JSON.stringify({ video_url: { url: p.dataUrl }, thumbnail: THUMB_BOX }) });
    } catch {
      throw describeNetworkError();
    }
    if (!res.ok) {
      let err = null;
      try {
        err = (await res.json()).error;
      } catch {
        /* not JSON */
      }
      throw describeHttpError(res.status, err, res.headers.get('Retry-After'), 'video');
    }
    p.video = videoFacts(await res.json());
    p.width = p.video.width;
    p.height = p.video.height;
    p.state = 'ready';
    announce(`Added video ${p.name}: ${p.video.frames.length} frames sampled from ${formatSeconds(p.video.duration)}.`);
  } catch (e) {
    p.state = 'error';
    p.error = e && e.title ? e : { title: 'Could not read the video', detail: String((e && e.message) || e) };
    announce(`${p.error.title}. ${p.error.detail}`);
  }
  if (!pending.includes(p)) return; // removed while it was read
  renderAttachments();
  updateSendState();
}

// The reply of /video/frames as kept with the message: facts, and each sampled frame with its
// time and thumbnail (a PNG data URL, so a stored conversation shows its strip again).
function videoFacts(j) {
  const th = j.thumbnails;
  const canvas = document.createElement('canvas');
  canvas.width = th.width;
  canvas.height = th.height;
  const g = canvas.getContext('2d');
  const frames = j.frames.map((f, k) => {
    const rgb = Uint8Array.from(atob(th.data[k]), (c) => c.charCodeAt(0));
    g.putImageData(new ImageData(rgbToRgba(rgb, th.width, th.height), th.width, th.height), 0, 0);
    return { index: f.index, time: f.time_s, group: f.group, thumb: canvas.toDataURL('image/png') };
  });
  return {
    width: j.width,
    height: j.height,
    fps: j.fps,
    duration: j.duration_s,
    totalFrames: j.total_frames,
    tokens: j.video_tokens,
    resized: { width: j.resized_width, height: j.resized_height },
    frames,
    groups: j.groups.map((gr) => ({ time: gr.time_s, text: gr.text })),
  };
}

// The sampled frames in temporal groups (two frames make one patch of the vision tower), each group
// under the timestamp the prompt gives it, each frame with its own time in the clip.
function frameStrip(v, name) {
  const groups = v.groups.map((gr, i) =>
    el(
      'li',
      { class: 'frame-group', title: `Frames ${v.frames.filter((f) => f.group === i).map((f) => f.index).join(' and ')}: the model reads them as one step, at ${gr.text}` },
      el('span', { class: 'group-time', text: gr.text }),
      el(
        'ol',
        { class: 'frames' },
        ...v.frames
          .filter((f) => f.group === i)
          .map((f) =>
            el(
              'li',
              { class: 'frame', 'data-index': String(f.index) },
              el('img', { class: 'frame-thumb', src: f.thumb, alt: `${name}, frame ${f.index} at ${formatSeconds(f.time)}` }),
              el('span', { class: 'frame-time', text: formatSeconds(f.time) }),
            ),
          ),
      ),
    ),
  );
  return stripScroller(el('ol', { class: 'frame-strip', 'aria-label': `Frames of ${name} the model sees` }, ...groups), name);
}

// A strip wider than its bubble (a phone, a long clip) says so: a fade on the side with more frames
// and an arrow that scrolls on; the groups snap into place. The classes follow the scroll position
// and the strip's size.
function stripScroller(strip, name) {
  const more = el(
    'button',
    { type: 'button', class: 'strip-more', 'aria-label': `Show later frames of ${name}`, title: 'Later frames', onclick: () => strip.scrollBy({ left: strip.clientWidth * 0.8, behavior: 'smooth' }) },
    icon('M9 5l7 7-7 7'),
  );
  const box = el('div', { class: 'frame-scroller' }, strip, more);
  const update = () => {
    const over = strip.scrollWidth - strip.clientWidth > 1;
    box.classList.toggle('more-right', over && strip.scrollLeft + strip.clientWidth < strip.scrollWidth - 1);
    box.classList.toggle('more-left', over && strip.scrollLeft > 1);
  };
  strip.addEventListener('scroll', update, { passive: true });
  new ResizeObserver(update).observe(strip);
  return box;
}

// The × button of a pending attachment (image or video): drops it and gives the focus back to the prompt.
function removeButton(p) {
  return el(
    'button',
    {
      type: 'button',
      class: 'att-remove',
      'aria-label': `Remove ${p.name}`,
      onclick: () => {
        pending = pending.filter((x) => x.id !== p.id);
        renderAttachments();
        updateSendState();
        announce(`Removed ${p.name}.`);
        $('prompt').focus();
      },
    },
    icon('M6 6l12 12M18 6L6 18'),
  );
}

function videoAttachment(p) {
  const remove = removeButton(p);
  let meta;
  if (p.state === 'reading') meta = el('span', { class: 'att-meta', text: `${formatBytes(p.bytes)} · reading the frames…` });
  else if (p.state === 'error')
    meta = el('span', { class: 'att-meta att-error', role: 'alert' }, el('strong', { text: p.error.title }), ` ${p.error.detail}`);
  else {
    const v = p.video;
    meta = el(
      'span',
      { class: 'att-meta', title: `Each frame is sent to the model as ${v.resized.width}×${v.resized.height} pixels` },
      `${formatSeconds(v.duration)} · ${v.width}×${v.height} · ${v.frames.length} of ${v.totalFrames} frames · `,
      el('strong', { class: 'att-tokens', text: `${v.tokens.toLocaleString('en-US')} tokens` }),
    );
  }
  return el(
    'li',
    { class: `att att-video att-${p.state}`, 'data-id': p.id, 'aria-busy': String(p.state === 'reading') },
    el('span', { class: 'att-info' }, el('span', { class: 'att-name', text: p.name }), meta),
    remove,
    p.state === 'ready' ? frameStrip(p.video, p.name) : null,
  );
}

function sizeInfo(img) {
  const r = smartResize(img.height, img.width, minPixels(), settings.maxPixels);
  return r;
}

function renderAttachments() {
  const ul = $('attachments');
  ul.hidden = pending.length === 0;
  // Something attached before the first question: the empty state drops its lead and shrinks its
  // drop zone, so the task cards stay on screen above the taller composer.
  $('app').classList.toggle('has-pending', pending.length > 0);
  $('dropzone').querySelector('.dz-main').textContent = pending.length ? 'Add another image or video' : 'Choose an image or a video';
  ul.replaceChildren(
    ...pending.map((p) => {
      if (p.kind === 'video') return videoAttachment(p);
      const r = sizeInfo(p);
      const meta = r.error
        ? el('span', { class: 'att-meta att-warn', text: 'Aspect ratio too extreme (over 200:1)' })
        : el(
            'span',
            { class: 'att-meta', title: `Sent to the model as ${r.width}×${r.height} pixels` },
            `${p.width}×${p.height} · `,
            el('strong', { class: 'att-tokens', text: `${r.tokens.toLocaleString('en-US')} tokens` }),
          );
      return el(
        'li',
        { class: 'att', 'data-id': p.id },
        el('img', { class: 'att-thumb', src: p.dataUrl, alt: p.name }),
        el('span', { class: 'att-info' }, el('span', { class: 'att-name', text: p.name }), meta),
        removeButton(p),
      );
    }),
  );
}

// ---- Markdown ------------------------------------------------------------------------------------

let markdownReady = false;
function setupMarkdown() {
  if (markdownReady || !window.marked || !window.DOMPurify) return markdownReady;
  window.marked.use({ gfm: true, breaks: false });
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A') {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer');
    }
  });
  markdownReady = true;
  return true;
}

const PURIFY_CONFIG = {
  RETURN_DOM_FRAGMENT: true,
  // Model output must not load anything (tracking pixels, remote media) or carry styles/forms.
  FORBID_TAGS: ['style', 'img', 'svg', 'math', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'video', 'audio', 'source', 'picture', 'link', 'meta'],
  FORBID_ATTR: ['style', 'class', 'id'],
};

function renderMarkdown(target, text) {
  if (!setupMarkdown()) {
    target.textContent = text; // libraries missing: plain text is still correct
    return;
  }
  const frag = window.DOMPurify.sanitize(window.marked.parse(text, { async: false }), PURIFY_CONFIG);
  for (const t of frag.querySelectorAll('table')) {
    const wrap = document.createElement('div');
    wrap.className = 'table-wrap';
    t.replaceWith(wrap);
    wrap.append(t);
  }
  target.replaceChildren(frag);
}

// ---- Rendering the conversation ------------------------------------------------------------------

const views = new WeakMap(); // message object → its DOM parts

function fmtNum(x, digits = 1) {
  return x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(digits);
}

// Cache badges say what a person would call reuse: earlier turns of this conversation, or an image
// read before. The server counts every prompt token whose KV it took from its prefix cache
// (timings.cached_prompt_tokens, also usage.prompt_tokens_details.cached_tokens) and sets
// prefix_cache_hit whenever that count is above 0. But every prompt opens with the chat template's
// fixed header, "<|im_start|>user\n" (3 tokens; with a system prompt, its block before that), which
// any earlier request left in the cache, so a first question "hits" without reusing anything. The
// rule, from the response alone:
// - a follow-up (the request carries earlier turns) whose cached tokens exceed the header reused
//   this conversation: "reused N tokens of this conversation", N the cached tokens;
// - any question whose cached tokens cover the header and all its image tokens reused an image
//   read before (the same picture in a new conversation): "reused N tokens: this image was read
//   before";
// - image_cache_hit (the image embeddings came from the image cache, the vision tower skipped)
//   otherwise: "image from the cache", with its image tokens.
// A first question reusing no more than the header (or a long system prompt) gets no badge.
const TEMPLATE_HEADER_TOKENS = 3;
function reuseBadge(m, followUp) {
  const t = m.timings && typeof m.timings === 'object' ? m.timings : null;
  const fin = (x) => typeof x === 'number' && Number.isFinite(x);
  const cached = fin(t?.cached_prompt_tokens) ? t.cached_prompt_tokens : m.usage?.prompt_tokens_details?.cached_tokens;
  const images = t && fin(t.image_tokens) ? t.image_tokens : 0;
  const n = (x) => x.toLocaleString('en-US');
  if (fin(cached) && followUp && cached > TEMPLATE_HEADER_TOKENS)
    return { text: `reused ${n(cached)} tokens of this conversation`, title: 'The server kept its work on the earlier turns (the prefix cache) and did not read them again' };
  if (fin(cached) && images > 0 && cached >= TEMPLATE_HEADER_TOKENS + images)
    return { text: `reused ${n(cached)} tokens: this image was read before`, title: 'The server kept its work on this image from an earlier question (the prefix cache)' };
  if (t && t.image_cache_hit === true && images > 0)
    return { text: `image from the cache (${n(images)} tokens)`, title: 'The image was read before: its features came from the image cache' };
  return null;
}

// How the answer was made, in plain words, for the "Details" toggle under it: "first word after
// 0.4 s", "read the image in 3.2 s". From the server's timings (docs/API.md), or without them the
// browser's own measurements. `media` is "image" or "video".
function secs(ms) {
  const s = ms / 1000;
  return `${s < 0.1 ? s.toFixed(2) : s < 10 ? s.toFixed(1) : Math.round(s)} s`;
}
function timingItems(m, media) {
  const items = [];
  const t = m.timings && typeof m.timings === 'object' ? m.timings : null;
  const fin = (x) => typeof x === 'number' && Number.isFinite(x);
  const n = (x) => x.toLocaleString('en-US');
  const u = m.usage || {};
  if (t) {
    if (fin(t.ttft_ms)) items.push({ text: `first word after ${secs(t.ttft_ms)}`, title: 'From sending the question to the first word of the answer' });
    if (fin(t.queue_ms) && t.queue_ms >= 100) items.push({ text: `waited ${secs(t.queue_ms)} for a free slot`, title: 'The server was busy with other questions' });
    if (fin(t.image_tokens) && t.image_tokens > 0) {
      items.push({ text: `the ${media} counts as ${n(t.image_tokens)} tokens`, title: 'Its size in the model’s input; larger images see more detail and take longer' });
      const read = (fin(t.vision_ms) ? t.vision_ms : 0) + (fin(t.preprocess_ms) ? t.preprocess_ms : 0);
      if (fin(t.vision_ms) && t.vision_ms > 0) items.push({ text: `read the ${media} in ${secs(read)}`, title: 'Decoding and the vision encoder' });
    }
    const cached = fin(t.cached_prompt_tokens) ? t.cached_prompt_tokens : 0;
    if (fin(t.prefill_ms) && t.prefill_ms > 0 && fin(u.prompt_tokens) && u.prompt_tokens > cached)
      items.push({ text: `read ${n(u.prompt_tokens - cached)} tokens of question and history in ${secs(t.prefill_ms)}`, title: 'The prompt the model read before answering (the earlier turns it reused are not counted)' });
    else if (fin(t.prefill_tok_s) && t.prefill_tok_s > 0) items.push({ text: `read the question at ${fmtNum(t.prefill_tok_s)} tokens a second` });
    if (fin(u.completion_tokens))
      items.push({ text: fin(t.decode_tok_s) && t.decode_tok_s > 0 ? `wrote ${n(u.completion_tokens)} tokens, ${fmtNum(t.decode_tok_s)} a second` : `wrote ${n(u.completion_tokens)} tokens` });
  } else {
    if (m.client && fin(m.client.ttft_ms)) items.push({ text: `first word after ${secs(m.client.ttft_ms)}`, title: 'Measured in this browser' });
    if (fin(u.completion_tokens)) items.push({ text: `wrote ${n(u.completion_tokens)} tokens` });
    if (m.client && fin(m.client.tok_s)) items.push({ text: `about ${fmtNum(m.client.tok_s)} tokens a second`, title: 'Measured in this browser' });
  }
  return items;
}

// The server left out the oldest turns to fit its context (qvl's history: "trim"): said beside the
// answer, not hidden in the details, since the answer did not see them.
function droppedBadge(m) {
  const h = m.usage && m.usage.history;
  if (!h || !(h.dropped_turns > 0)) return null;
  return { text: `${h.dropped_turns} older turn${h.dropped_turns > 1 ? 's' : ''} left out`, title: `The conversation did not fit the context: the server left out the oldest ${h.dropped_turns} turn(s)${h.dropped_images ? ` and ${h.dropped_images} image(s)` : ''} (${h.dropped_tokens} tokens)` };
}

function imagesBefore(msg) {
  const list = [];
  if (!current) return list;
  for (const m of current.messages) {
    if (m === msg) break;
    if (m.role === 'user') for (const img of m.images ?? []) if (img.kind !== 'video') list.push(img);
  }
  return list;
}

// Distinct, saturated hues; one per label in order of appearance, so equal labels share a colour.
const HUES = [330, 190, 38, 265, 150, 12, 210, 90, 290, 55];

// The server's boxes of an answer (the request's "boxes": true; docs/API.md) as marks on the 0..1000
// grid of the image each belongs to: [{kind, x1, y1, x2, y2 | x, y, label, image}]. `image` indexes
// the conversation's images; the server counts the prompt's, which lack the ones a trimmed history
// dropped (the oldest).
function marksOf(msg) {
  const all = imagesBefore(msg);
  const dropped = msg.usage?.history?.dropped_images ?? 0;
  const marks = [];
  for (const b of Array.isArray(msg.boxes) ? msg.boxes : []) {
    const image = (Number.isInteger(b.image) ? b.image : 0) + dropped;
    const im = all[image];
    if (!im || !(im.width > 0) || !(im.height > 0)) continue;
    const gx = (v) => Math.min(1000, Math.max(0, (v / im.width) * 1000));
    const gy = (v) => Math.min(1000, Math.max(0, (v / im.height) * 1000));
    const label = typeof b.label === 'string' ? b.label : '';
    if (Array.isArray(b.box) && b.box.length === 4) marks.push({ kind: 'box', x1: gx(b.box[0]), y1: gy(b.box[1]), x2: gx(b.box[2]), y2: gy(b.box[3]), label, image });
    else if (Array.isArray(b.point) && b.point.length === 2) marks.push({ kind: 'point', x: gx(b.point[0]), y: gy(b.point[1]), label, image });
  }
  return marks;
}

// Draws boxes/points over the image as percentage-positioned elements, so they follow the image at
// whatever size it is displayed (0..1000 grid → 0..100 %). Each image shows its own marks; an image
// without any (the user thinks the server picked the wrong one) shows those of the first marked one.
function groundingFigure(msg, allMarks) {
  const all = imagesBefore(msg);
  const imgs = all.filter((i) => i.dataUrl);
  if (!allMarks.length || !imgs.length) return null;
  const first = imgs.indexOf(all[allMarks[0].image]);
  let which = first >= 0 ? first : imgs.length - 1;
  const own = (i) => allMarks.filter((m) => all[m.image] === imgs[i]);
  let marks = allMarks;
  const hueOf = new Map();
  for (const mk of allMarks) {
    const key = mk.label || '';
    if (!hueOf.has(key)) hueOf.set(key, HUES[hueOf.size % HUES.length]);
  }
  const stage = el('div', { class: 'ground-stage' });
  const caption = el('figcaption', { class: 'ground-caption' });
  const fig = el('figure', { class: 'ground' }, stage, caption);
  const draw = () => {
    const img = imgs[which];
    marks = own(which).length ? own(which) : first >= 0 && own(first).length ? own(first) : allMarks;
    const pic = el('img', { class: 'ground-img', src: img.dataUrl, alt: `${img.name} with ${marks.length} marked regions` });
    pic.addEventListener('load', () => stickToBottom());
    const nodes = [pic];
    marks.forEach((mk, i) => {
      const label = mk.label || `#${i + 1}`;
      const hue = hueOf.get(mk.label || '');
      const node =
        mk.kind === 'box'
          ? el('div', { class: 'gbox', 'aria-hidden': 'true' }, el('span', { class: 'glabel', text: label }))
          : el('div', { class: 'gpoint', 'aria-hidden': 'true' }, el('span', { class: 'glabel', text: label }));
      node.style.setProperty('--hue', String(hue));
      if (mk.kind === 'box') {
        node.style.left = `${mk.x1 / 10}%`;
        node.style.top = `${mk.y1 / 10}%`;
        node.style.width = `${(mk.x2 - mk.x1) / 10}%`;
        node.style.height = `${(mk.y2 - mk.y1) / 10}%`;
        if (mk.y1 < 60) node.classList.add('label-inside'); // no room above the box
        if (mk.x1 > 650) node.classList.add('label-end'); // keep the label inside the image
      } else {
        node.style.left = `${mk.x / 10}%`;
        node.style.top = `${mk.y / 10}%`;
        if (mk.x > 800) node.classList.add('label-end');
      }
      nodes.push(node);
    });
    stage.replaceChildren(...nodes);
    const n = marks.filter((m) => m.kind === 'box').length;
    const p = marks.length - n;
    const labels = [...new Set(marks.map((m) => m.label).filter(Boolean))];
    const parts = [];
    if (n) parts.push(`${n} box${n === 1 ? '' : 'es'}`);
    if (p) parts.push(`${p} point${p === 1 ? '' : 's'}`);
    caption.replaceChildren(
      el('span', { text: `${parts.join(' and ')} on ${img.name}` + (labels.length ? `: ${labels.slice(0, 12).join(', ')}${labels.length > 12 ? '…' : ''}` : '') }),
    );
    if (imgs.length > 1) {
      const group = el('span', { class: 'ground-pick', role: 'group', 'aria-label': 'Draw on image' });
      imgs.forEach((im, i) =>
        group.append(
          el('button', {
            type: 'button',
            class: 'chip chip-small',
            'aria-pressed': String(i === which),
            text: `Image ${i + 1}`,
            onclick: () => {
              which = i;
              draw();
            },
          }),
        ),
      );
      caption.append(group);
    }
  };
  draw();
  return fig;
}

function errorCard(msg) {
  const e = msg.error;
  const card = el('div', { class: `error-card err-${e.kind}`, role: 'alert' });
  card.append(el('strong', { class: 'error-title', text: e.title }), el('p', { class: 'error-detail', text: e.detail }));
  const actions = el('div', { class: 'error-actions' });
  if (retry && retry.msg === msg) {
    actions.append(
      el('span', { class: 'retry-count', id: 'retry-count', text: `Retrying in ${retry.remaining} s…` }),
      el('button', { type: 'button', class: 'btn btn-small', text: 'Retry now', onclick: () => retryNow(msg) }),
      el('button', { type: 'button', class: 'btn btn-small btn-ghost', text: 'Cancel', onclick: cancelRetry }),
    );
  } else {
    actions.append(el('button', { type: 'button', class: 'btn btn-small', onclick: () => retryNow(msg) }, icon(ICON_RETRY), 'Try again'));
    if (e.kind === 'too_large' || e.kind === 'auth')
      actions.append(el('button', { type: 'button', class: 'btn btn-small btn-ghost', text: 'Open settings', onclick: openSettings }));
  }
  card.append(actions);
  return card;
}

// The reasoning block: plain text (never markdown or HTML), "Thinking…" while it streams, "Thought"
// after; open while the reasoning streams, closed when the answer begins, unless the reader chose.
function fillReasoning(msg, v, streaming) {
  if (!v.reasoning) return;
  if (!msg.reasoning) {
    v.reasoning.hidden = true;
    return;
  }
  v.reasoning.hidden = false;
  v.reasoningText.textContent = msg.reasoning;
  const thinking = streaming && !msg.text;
  v.reasoningSummary.textContent = thinking ? 'Thinking…' : 'Thought';
  if (!v.reasoning.dataset.user) {
    v.reasoning.dataset.auto = String(thinking);
    v.reasoning.open = thinking;
  }
}

function fillAssistant(msg) {
  const v = views.get(msg);
  if (!v) return;
  const streaming = active && active.msg === msg;
  v.li.setAttribute('aria-busy', String(!!streaming));
  v.li.classList.toggle('streaming', !!streaming);
  fillReasoning(msg, v, streaming);
  if (msg.text) renderMarkdown(v.md, msg.text);
  else if (streaming && msg.reasoning) v.md.replaceChildren();
  else if (streaming) {
    // Before the first token the server is encoding images and reading the prompt: on a CPU that
    // can take seconds, so say what is happening and for how long.
    const secs = Math.floor((performance.now() - active.started) / 1000);
    const prev = current ? current.messages[current.messages.indexOf(msg) - 1] : null;
    const media = prev?.images ?? [];
    const what = media.some((m) => m.kind === 'video') ? 'Watching the video' : imagesBefore(msg).length ? 'Reading the image' : 'Thinking';
    v.md.replaceChildren(
      el('span', { class: 'thinking' }, what, el('span', { class: 'dots', 'aria-hidden': 'true' }), secs >= 2 ? el('span', { class: 'elapsed', text: ` ${secs} s` }) : null),
    );
  }
  else v.md.replaceChildren();
  v.extra.replaceChildren();
  if (!streaming) {
    const fig = groundingFigure(msg, marksOf(msg));
    if (fig) {
      v.extra.append(fig);
      // The drawing says it better; keep the coordinates one click away.
      for (const pre of v.md.querySelectorAll('pre')) {
        const k = (pre.textContent.match(/"(bbox_2d|bbox|point_2d|point)"/g) ?? []).length;
        if (!k) continue;
        const d = el('details', { class: 'json-details' }, el('summary', { text: `Coordinates (JSON, ${k} item${k === 1 ? '' : 's'})` }));
        pre.replaceWith(d);
        d.append(pre);
      }
    }
  }
  if (msg.toolCalls && msg.toolCalls.length) v.extra.append(toolCallsView(msg.toolCalls));
  if (!streaming && msg.extract && msg.text && !msg.error && !msg.stopped) v.extra.append(extractView(msg, v));
  if (msg.error) v.extra.append(errorCard(msg));
  // Footer: badges, timings, copy.
  v.meta.replaceChildren();
  if (streaming) return;
  const badges = [];
  if (msg.stopped) badges.push(el('span', { class: 'badge badge-warn', text: 'Stopped' }));
  if (msg.finish === 'length') badges.push(el('span', { class: 'badge badge-warn', text: 'Cut at max length' }));
  const reuse = reuseBadge(msg, current ? current.messages.indexOf(msg) > 1 : false);
  if (reuse) badges.push(el('span', { class: 'badge badge-reuse', title: reuse.title, text: reuse.text }));
  const dropped = droppedBadge(msg);
  if (dropped) badges.push(el('span', { class: 'badge badge-warn', title: dropped.title, text: dropped.text }));
  const prev = current ? current.messages[current.messages.indexOf(msg) - 1] : null;
  const media = (prev?.images ?? []).some((m) => m.kind === 'video') ? 'video' : 'image';
  const times = timingItems(msg, media).map((t) => el('li', { class: 't-item', title: t.title, text: t.text }));
  if (msg.text) {
    const copyBtn = el('button', { type: 'button', class: 'icon-btn copy-btn', 'aria-label': 'Copy answer', title: 'Copy answer' }, icon(ICON_COPY));
    copyBtn.addEventListener('click', async () => {
      const ok = await copyText(msg.text);
      copyBtn.replaceChildren(icon(ok ? ICON_CHECK : ICON_COPY));
      copyBtn.classList.toggle('copied', ok);
      announce(ok ? 'Answer copied to the clipboard.' : 'Could not copy.');
      setTimeout(() => {
        copyBtn.replaceChildren(icon(ICON_COPY));
        copyBtn.classList.remove('copied');
      }, 1600);
    });
    v.meta.append(copyBtn);
  }
  v.meta.append(...badges);
  if (times.length) v.meta.append(el('details', { class: 'timings' }, el('summary', { class: 'timings-summary', text: 'Details' }), el('ul', { class: 'timing-list', 'aria-label': 'How it was answered' }, ...times)));
}

// Tool calls of an answer: each function's name and its arguments, pretty-printed, as text nodes.
function toolCallsView(calls) {
  return el(
    'div',
    { class: 'tool-calls' },
    ...calls.map((c) =>
      el(
        'section',
        { class: 'tool-call', 'aria-label': `Tool call ${c.function?.name ?? ''}` },
        el('div', { class: 'tool-call-head' }, el('span', { class: 'badge', text: 'Tool call' }), el('code', { class: 'tool-call-name', text: c.function?.name ?? '(no name)' })),
        el('pre', { class: 'tool-call-args' }, el('code', { text: prettyArguments(c.function?.arguments ?? '') })),
      ),
    ),
  );
}

// "Extract as table" answers: the rows as an HTML table (text nodes only) and a CSV download; an
// answer that does not parse (cut by max_tokens, say) says so and shows the raw text.
function extractView(msg, v) {
  const cols = msg.extract.columns;
  const r = parseExtract(msg.text, cols);
  const box = el('div', { class: 'extract' });
  if (r.error) {
    box.append(
      el('div', { class: 'error-card extract-error', role: 'alert' },
        el('strong', { class: 'error-title', text: 'Could not read the table' }),
        el('p', { class: 'error-detail', text: `${r.error}${msg.finish === 'length' ? ' The answer was cut at the max answer length; raise it in Settings and try again.' : ''}` })),
      el('details', { class: 'json-details', open: true }, el('summary', { text: 'Raw answer' }), el('pre', { class: 'extract-raw' }, el('code', { text: msg.text }))),
    );
    v.md.replaceChildren();
    return box;
  }
  const table = el(
    'table',
    { class: 'extract-table' },
    el('thead', {}, el('tr', {}, ...cols.map((c) => el('th', { scope: 'col', text: c })))),
    el('tbody', {}, ...r.rows.map((row) => el('tr', {}, ...row.map((cell) => el('td', { text: cell }))))),
  );
  const download = el('button', { type: 'button', class: 'btn btn-small extract-csv', text: 'Download CSV' });
  download.addEventListener('click', () => {
    const url = URL.createObjectURL(new Blob([toCSV(cols, r.rows)], { type: 'text/csv;charset=utf-8' }));
    const a = el('a', { href: url, download: 'table.csv', hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  });
  box.append(
    el('div', { class: 'table-wrap' }, table),
    el('div', { class: 'extract-actions' }, download, el('span', { class: 'extract-count', text: `${r.rows.length} row${r.rows.length === 1 ? '' : 's'}` })),
  );
  // The table says it; keep the JSON one click away.
  const raw = el('details', { class: 'json-details' }, el('summary', { text: 'JSON' }), el('pre', {}, el('code', { text: msg.text })));
  v.md.replaceChildren(raw);
  return box;
}

function messageView(msg) {
  if (msg.role === 'user') {
    const imgs = (msg.images ?? []).map((img) =>
      img.kind === 'video'
        ? el('div', { class: 'msg-video' }, el('span', { class: 'msg-video-name', text: img.dataUrl ? img.name : `${img.name} (not kept in this browser)` }), img.video ? frameStrip(img.video, img.name) : null)
        : img.dataUrl
        ? el('img', { class: 'msg-img', src: img.dataUrl, alt: img.name, title: `${img.name} · ${img.width}×${img.height}` })
        : el('span', { class: 'msg-img msg-img-missing', text: `${img.name} (not kept in this browser)` }),
    );
    return el(
      'article',
      { class: 'msg user', 'aria-label': 'Your message' },
      el('h3', { class: 'sr-only', text: 'You' }),
      el('div', { class: 'bubble' }, imgs.length ? el('div', { class: 'msg-images' }, ...imgs) : null, msg.text ? el('p', { class: 'msg-text', text: msg.text }) : null),
    );
  }
  const md = el('div', { class: 'md' });
  const extra = el('div', { class: 'extra' });
  const meta = el('div', { class: 'meta' });
  const li = el(
    'article',
    { class: 'msg assistant', 'aria-label': 'Answer' },
    el('div', { class: 'avatar', 'aria-hidden': 'true', text: 'Q' }),
    el('div', { class: 'answer' }, el('h3', { class: 'sr-only', text: 'Answer' }), md, extra, meta),
  );
  // A reasoning model's thinking: collapsible, open while it streams, closed once the answer starts
  // (unless the reader opened or closed it).
  const reasoningText = el('div', { class: 'reasoning-text' });
  const reasoningSummary = el('summary', { class: 'reasoning-summary', text: 'Thinking' });
  const reasoning = el('details', { class: 'reasoning', hidden: true }, reasoningSummary, reasoningText);
  reasoning.addEventListener('toggle', () => {
    if (reasoning.dataset.auto !== String(reasoning.open)) reasoning.dataset.user = '1';
  });
  li.querySelector('.answer').insertBefore(reasoning, md);
  views.set(msg, { li, md, extra, meta, reasoning, reasoningText, reasoningSummary });
  fillAssistant(msg);
  return li;
}

function renderLog() {
  const log = $('log');
  const msgs = current ? current.messages : [];
  log.replaceChildren(...msgs.map(messageView));
  $('empty').hidden = msgs.length > 0;
  $('app').classList.toggle('is-empty', msgs.length === 0);
  log.hidden = msgs.length === 0;
  $('conv-title').textContent = current ? current.title : 'New conversation';
  document.title = current ? `${current.title} — qvl` : 'qvl — ask about your images and videos';
}

function relTime(ts) {
  const d = Date.now() - ts;
  if (d < 60e3) return 'just now';
  if (d < 3600e3) return `${Math.floor(d / 60e3)} min ago`;
  if (d < 86400e3) return `${Math.floor(d / 3600e3)} h ago`;
  return new Date(ts).toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
}

function renderSidebar() {
  const ul = $('conv-list');
  if (!conversations.length) {
    ul.replaceChildren(el('li', { class: 'conv-empty', text: 'No conversations yet.' }));
    return;
  }
  ul.replaceChildren(
    ...conversations.map((c) =>
      el(
        'li',
        { class: 'conv' + (c === current ? ' current' : '') },
        el(
          'button',
          { type: 'button', class: 'conv-open', 'aria-current': c === current ? 'true' : null, onclick: () => openConversation(c) },
          el('span', { class: 'conv-name', text: c.title }),
          el('span', { class: 'conv-time', text: relTime(c.updated) }),
        ),
        el('button', { type: 'button', class: 'icon-btn conv-del', 'aria-label': `Delete “${c.title}”`, onclick: () => deleteConversation(c) }, icon(ICON_TRASH)),
      ),
    ),
  );
}

function renderAll() {
  renderLog();
  renderSidebar();
  renderAttachments();
  updateSendState();
  // A conversation opens at its last answer; an empty one at its heading (on a phone the empty
  // state is taller than the screen, and its bottom would hide the heading under the top bar).
  if (current && current.messages.length) scrollToBottom(true);
  else {
    autoStick = true;
    $('chat').scrollTop = 0;
  }
}

// The view follows new output while the reader is at the bottom; scrolling up stops that.
let autoStick = true;
function nearBottom() {
  const c = $('chat');
  return c.scrollHeight - c.scrollTop - c.clientHeight < 120;
}
function scrollToBottom(force) {
  const c = $('chat');
  if (force) autoStick = true;
  if (force || autoStick) c.scrollTop = c.scrollHeight;
}
function stickToBottom() {
  scrollToBottom(false);
}

// ---- Conversation actions -----------------------------------------------------------------------

function stopActive() {
  if (active) active.controller.abort();
}

function openConversation(c) {
  stopActive();
  cancelRetry();
  current = c;
  closeSidebar();
  renderAll();
  $('prompt').focus();
}

function newConversation() {
  stopActive();
  cancelRetry();
  current = null;
  closeSidebar();
  renderAll();
  $('prompt').focus();
}

function deleteConversation(c) {
  if (active && current === c) stopActive();
  const i = conversations.indexOf(c);
  if (i < 0) return;
  conversations.splice(i, 1);
  const wasCurrent = current === c;
  if (wasCurrent) current = null;
  saveConversations();
  renderAll();
  toast(`Deleted “${c.title}”.`, {
    label: 'Undo',
    run: () => {
      conversations.push(c);
      if (wasCurrent) current = c;
      saveConversations();
      renderAll();
    },
  });
}

// ---- Sending and streaming ----------------------------------------------------------------------

let active = null; // {controller, msg}
let retry = null; // {msg, remaining, timer, attempt}
let modelId = null; // from GET /v1/models; until known, requests leave "model" out (the server's default)

function updateSendState() {
  const busy = !!active;
  $('send-btn').hidden = busy;
  $('stop-btn').hidden = !busy;
  const hasContent = $('prompt').value.trim() !== '' || pending.length > 0;
  $('send-btn').disabled = !hasContent || pending.some((p) => p.kind === 'video' && p.state === 'reading');
}

async function send(extract) {
  if (active) return;
  let text = $('prompt').value.trim();
  if (extract) text = extractPrompt(text, extract.columns);
  if (!text && !pending.length) return;
  const unready = pending.find((p) => p.kind === 'video' && p.state !== 'ready');
  if (unready) {
    toast(unready.state === 'error' ? `“${unready.name}” cannot be sent: ${unready.error.title.toLowerCase()}. Remove it first.` : `“${unready.name}” is still being read.`);
    return;
  }
  const bad = pending.find((p) => p.kind !== 'video' && sizeInfo(p).error);
  if (bad) {
    toast(`“${bad.name}” cannot be sent: its aspect ratio is above 200:1.`);
    return;
  }
  cancelRetry();
  const now = Date.now();
  if (!current) {
    current = { id: newId(), title: '', created: now, updated: now, messages: [] };
    conversations.unshift(current);
  }
  const user = {
    role: 'user',
    text,
    images: pending.map(({ kind, name, type, bytes, dataUrl, width, height, video }) => ({ kind, name, type, bytes, dataUrl, width, height, video })),
    at: now,
  };
  current.messages.push(user);
  if (!current.title) current.title = titleFor(user);
  pending = [];
  $('prompt').value = '';
  autoGrow();
  const msg = { role: 'assistant', text: '', at: now };
  if (extract) msg.extract = { columns: extract.columns };
  current.messages.push(msg);
  current.updated = now;
  saveConversations();
  renderAll();
  await stream(msg, 0);
}

function requestBody(msg) {
  const upto = current.messages.slice(0, current.messages.indexOf(msg));
  return {
    ...(modelId ? { model: modelId } : {}),
    messages: buildMessages({ messages: upto }, settings.system),
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(settings.temperature),
    max_tokens: Number(settings.maxTokens),
    history: 'trim', // qvl: long chats drop their oldest turns instead of failing
    boxes: true, // qvl: bbox_2d / point_2d answers in image pixels, drawn over the image
    // qvl extensions: the image size limits for this request (smart_resize bounds, in pixels).
    max_pixels: Number(settings.maxPixels),
    min_pixels: minPixels(),
    ...(msg.extract ? { response_format: extractResponseFormat(msg.extract.columns) } : {}),
  };
}

class StreamError extends Error {
  constructor(info) {
    super(info.title);
    this.info = info;
  }
}

async function stream(msg, attempt) {
  const conv = current;
  const controller = new AbortController();
  active = { controller, msg, started: performance.now() };
  msg.text = '';
  delete msg.reasoning;
  delete msg.error;
  delete msg.stopped;
  delete msg.finish;
  delete msg.usage;
  delete msg.timings;
  delete msg.client;
  delete msg.toolCalls;
  delete msg.boxes;
  updateSendState();
  fillAssistant(msg);
  scrollToBottom(true);

  const t0 = performance.now();
  let tFirst = null;
  let nDeltas = 0;
  let frame = 0;
  const paint = () => {
    frame = 0;
    fillAssistant(msg);
    stickToBottom();
  };
  const onDelta = (s) => {
    if (!s) return;
    if (tFirst === null) tFirst = performance.now();
    nDeltas++;
    msg.text += s;
    if (!frame) frame = requestAnimationFrame(paint);
  };
  // Streamed tool calls: the first fragment of each index brings id and name, the rest append to
  // its arguments (docs/API.md "Tools").
  const onToolCalls = (parts) => {
    msg.toolCalls = msg.toolCalls || [];
    for (const p of parts) {
      const i = Number.isInteger(p.index) ? p.index : msg.toolCalls.length;
      const t = (msg.toolCalls[i] = msg.toolCalls[i] || { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (p.id) t.id = p.id;
      if (p.function?.name) t.function.name += p.function.name;
      if (typeof p.function?.arguments === 'string') t.function.arguments += p.function.arguments;
    }
    if (tFirst === null) tFirst = performance.now();
    if (!frame) frame = requestAnimationFrame(paint);
  };
  const onChunk = (c) => {
    if (c.error) throw new StreamError({ kind: 'server', title: 'The answer was interrupted', detail: c.error.message || 'Server error while generating.', retryAfter: null });
    const ch = c.choices && c.choices[0];
    if (ch) {
      if (ch.delta && typeof ch.delta.reasoning_content === 'string' && ch.delta.reasoning_content) {
        if (tFirst === null) tFirst = performance.now();
        msg.reasoning = (msg.reasoning || '') + ch.delta.reasoning_content;
        if (!frame) frame = requestAnimationFrame(paint);
      }
      if (ch.delta && typeof ch.delta.content === 'string') onDelta(ch.delta.content);
      if (ch.delta && Array.isArray(ch.delta.tool_calls)) onToolCalls(ch.delta.tool_calls);
      if (ch.delta && Array.isArray(ch.delta.boxes)) msg.boxes = ch.delta.boxes; // qvl: grounding in pixels
      if (ch.finish_reason) msg.finish = ch.finish_reason;
    }
    if (c.usage) msg.usage = c.usage;
    if (c.timings) msg.timings = c.timings;
  };

  const ticker = setInterval(() => {
    if (!msg.text) fillAssistant(msg);
  }, 1000);
  const headers = { 'Content-Type': 'application/json', Accept: 'text/event-stream' };
  if (settings.apiKey) headers.Authorization = `Bearer ${settings.apiKey}`;
  try {
    let res;
    try {
      res = await fetch('v1/chat/completions', { method: 'POST', headers, body: JSON.stringify(requestBody(msg)), signal: controller.signal });
    } catch (e) {
      if (controller.signal.aborted) throw e;
      throw new StreamError(describeNetworkError());
    }
    if (!res.ok) {
      let err = null;
      try {
        err = (await res.json()).error;
      } catch {
        /* not JSON */
      }
      const prev = conv.messages[conv.messages.indexOf(msg) - 1];
      const media = (prev?.images ?? []).some((m) => m.kind === 'video') ? 'video' : 'image';
      throw new StreamError(describeHttpError(res.status, err, res.headers.get('Retry-After'), media));
    }
    if (!(res.headers.get('Content-Type') || '').includes('text/event-stream')) {
      const j = await res.json(); // a server that ignored stream:true
      const m = j.choices?.[0]?.message;
      const calls = Array.isArray(m?.tool_calls) ? m.tool_calls.map((t, index) => ({ index, ...t })) : undefined;
      onChunk({ choices: [{ delta: { reasoning_content: m?.reasoning_content, content: m?.content ?? '', tool_calls: calls }, finish_reason: j.choices?.[0]?.finish_reason }], usage: j.usage, timings: j.timings });
    } else {
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let done = false;
      const sse = createSSEParser((data) => {
        if (data === '[DONE]') {
          done = true;
          return;
        }
        let chunk;
        try {
          chunk = JSON.parse(data);
        } catch {
          return; // a malformed event is skipped rather than ending the answer
        }
        onChunk(chunk);
      });
      while (!done) {
        let r;
        try {
          r = await reader.read();
        } catch (e) {
          if (controller.signal.aborted) throw e;
          throw new StreamError({ kind: 'offline', title: 'The connection was lost', detail: 'The server closed the connection before the answer was complete.', retryAfter: null });
        }
        if (r.done) break;
        sse.push(dec.decode(r.value, { stream: true }));
      }
      if (!done) {
        sse.end();
        if (!done) throw new StreamError({ kind: 'offline', title: 'The connection was lost', detail: 'The answer ended before the server said it was complete.', retryAfter: null });
      }
      reader.cancel().catch(() => {});
    }
  } catch (e) {
    if (controller.signal.aborted) msg.stopped = true;
    else if (e instanceof StreamError) msg.error = e.info;
    else msg.error = { kind: 'server', title: 'Something went wrong', detail: String((e && e.message) || e), retryAfter: null };
  } finally {
    if (frame) cancelAnimationFrame(frame);
    clearInterval(ticker);
    if (tFirst !== null) {
      const tEnd = performance.now();
      msg.client = { ttft_ms: tFirst - t0, tok_s: nDeltas > 1 && tEnd > tFirst ? ((nDeltas - 1) * 1000) / (tEnd - tFirst) : undefined };
    }
    active = null;
    conv.updated = Date.now();
    saveConversations();
    updateSendState();
    if (msg.error && msg.error.retryAfter != null && attempt < MAX_AUTO_RETRIES) scheduleRetry(msg, attempt + 1, msg.error.retryAfter);
    fillAssistant(msg);
    renderSidebar();
    if (current === conv) stickToBottom();
    if (msg.error && msg.error.kind === 'offline') pollHealth(); // let the status pill say so too
    if (msg.error) announce(`${msg.error.title}. ${msg.error.detail}`);
    else if (msg.stopped) announce('Stopped.');
    else announce('Answer complete.');
  }
}

function scheduleRetry(msg, attempt, seconds) {
  cancelRetry();
  retry = { msg, attempt, remaining: Math.max(1, seconds), timer: null };
  retry.timer = setInterval(() => {
    if (!retry) return;
    retry.remaining--;
    const c = document.getElementById('retry-count');
    if (c) c.textContent = `Retrying in ${retry.remaining} s…`;
    if (retry.remaining <= 0) {
      const r = retry;
      cancelRetry();
      if (current && current.messages.includes(r.msg) && !active) stream(r.msg, r.attempt);
    }
  }, 1000);
}

function cancelRetry() {
  if (!retry) return;
  clearInterval(retry.timer);
  const m = retry.msg;
  retry = null;
  fillAssistant(m);
}

function retryNow(msg) {
  if (active) return;
  const attempt = retry && retry.msg === msg ? retry.attempt : 0;
  cancelRetry();
  stream(msg, attempt);
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Clipboard API is only for secure contexts (https or localhost); fall back for plain http.
    const ta = el('textarea', { class: 'offscreen', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand('copy');
    } catch {
      ok = false;
    }
    ta.remove();
    return ok;
  }
}

// ---- Server status ------------------------------------------------------------------------------

let healthTimer = null;
async function pollHealth() {
  clearTimeout(healthTimer);
  let state = 'offline';
  let detail = '';
  try {
    const r = await fetch('health', { cache: 'no-store' });
    state = r.ok ? 'ready' : r.status === 503 ? 'loading' : 'error';
    if (!r.ok) detail = `HTTP ${r.status}`;
  } catch {
    state = 'offline';
  }
  if (state === 'ready' && !modelId) await loadModel();
  const s = $('status');
  s.dataset.state = state;
  $('status-text').textContent =
    state === 'ready' ? 'Ready' : state === 'loading' ? 'Loading model…' : state === 'offline' ? 'Server unreachable' : `Server error ${detail}`;
  $('status-model').textContent = state === 'ready' ? modelId || '' : '';
  s.title = state === 'ready' && modelId ? `Serving ${modelId}` : $('status-text').textContent;
  healthTimer = setTimeout(pollHealth, state === 'ready' ? 15000 : 3000);
}

async function loadModel() {
  try {
    const r = await fetch('v1/models', { cache: 'no-store', headers: settings.apiKey ? { Authorization: `Bearer ${settings.apiKey}` } : {} });
    if (!r.ok) return;
    const j = await r.json();
    if (j && Array.isArray(j.data) && j.data[0] && typeof j.data[0].id === 'string') modelId = j.data[0].id;
  } catch {
    /* keep the default name */
  }
}

// ---- Settings dialog ----------------------------------------------------------------------------

function syncSettingsForm() {
  const sel = $('set-maxpix');
  if (![...sel.options].some((o) => Number(o.value) === Number(settings.maxPixels)))
    sel.append(el('option', { value: String(settings.maxPixels), text: `${Math.round(settings.maxPixels / 1024)} tokens (custom)` }));
  sel.value = String(settings.maxPixels);
  $('set-temp').value = String(settings.temperature);
  $('set-temp-out').textContent = Number(settings.temperature).toFixed(2);
  $('set-maxtok').value = String(settings.maxTokens);
  $('set-system').value = settings.system;
  $('set-apikey').value = settings.apiKey;
  $('size-label').textContent = Math.round(settings.maxPixels / 1024).toLocaleString('en-US');
}

function readSettingsForm() {
  settings.maxPixels = Number($('set-maxpix').value) || DEFAULTS.maxPixels;
  const t = Number($('set-temp').value);
  settings.temperature = Number.isFinite(t) ? Math.min(2, Math.max(0, t)) : DEFAULTS.temperature;
  const n = Math.floor(Number($('set-maxtok').value));
  if (Number.isFinite(n) && n >= 1) settings.maxTokens = Math.min(32768, n);
  settings.system = $('set-system').value;
  settings.apiKey = $('set-apikey').value.trim();
  saveSettings();
  $('set-temp-out').textContent = settings.temperature.toFixed(2);
  $('size-label').textContent = Math.round(settings.maxPixels / 1024).toLocaleString('en-US');
  renderAttachments();
}

function openSettings() {
  syncSettingsForm();
  $('settings').showModal();
}

// ---- Sidebar (drawer on phones) -----------------------------------------------------------------

function openSidebar() {
  $('app').classList.add('sidebar-open');
  $('scrim').hidden = false;
  $('menu-btn').setAttribute('aria-expanded', 'true');
  $('new-chat').focus();
}
function closeSidebar() {
  if (!$('app').classList.contains('sidebar-open')) return;
  $('app').classList.remove('sidebar-open');
  $('scrim').hidden = true;
  $('menu-btn').setAttribute('aria-expanded', 'false');
}

// ---- Presets ------------------------------------------------------------------------------------

function applyPreset(name) {
  const p = PRESETS[name];
  if (!p) return;
  const ta = $('prompt');
  ta.value = p.text;
  autoGrow();
  updateSendState();
  ta.focus();
  if (p.select) {
    const i = p.text.indexOf(p.select);
    ta.setSelectionRange(i, i + p.select.length); // type to replace "all objects" with what to find
  } else ta.setSelectionRange(ta.value.length, ta.value.length);
  const hasImage = pending.length > 0 || (current && current.messages.some((m) => m.images && m.images.length));
  if (!hasImage) $('file-input').click();
}

function autoGrow() {
  const ta = $('prompt');
  ta.style.height = 'auto';
  ta.style.height = `${Math.min(ta.scrollHeight, 220)}px`;
}

// ---- Wiring -------------------------------------------------------------------------------------

function init() {
  syncSettingsForm();

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $('prompt').addEventListener('input', () => {
    autoGrow();
    updateSendState();
  });
  $('stop-btn').addEventListener('click', () => {
    stopActive();
    $('prompt').focus();
  });
  $('attach-btn').addEventListener('click', () => $('file-input').click());
  $('dropzone').addEventListener('click', () => $('file-input').click());
  $('file-input').addEventListener('change', (e) => {
    addFiles(e.target.files).then(() => $('prompt').focus());
    e.target.value = '';
  });
  for (const b of document.querySelectorAll('[data-preset]')) b.addEventListener('click', () => applyPreset(b.dataset.preset));
  for (const b of document.querySelectorAll('.extract-toggle'))
    b.addEventListener('click', () => {
      const row = $('extract-row');
      row.hidden = !row.hidden;
      for (const t of document.querySelectorAll('.extract-toggle')) t.setAttribute('aria-expanded', String(!row.hidden));
      if (!row.hidden) $('extract-cols').focus();
    });
  const runExtract = () => {
    const columns = parseColumns($('extract-cols').value);
    if (!columns.length) {
      toast('Name the columns first, separated by commas.');
      $('extract-cols').focus();
      return;
    }
    const hasImage = pending.length > 0 || (current && current.messages.some((m) => m.images && m.images.length));
    if (!hasImage && !$('prompt').value.trim()) {
      toast('Add an image (or write what to extract from) first.');
      return;
    }
    send({ columns });
  };
  $('extract-go').addEventListener('click', runExtract);
  $('extract-cols').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      runExtract();
    }
  });

  $('new-chat').addEventListener('click', newConversation);
  $('menu-btn').addEventListener('click', openSidebar);
  $('sidebar-close').addEventListener('click', () => {
    closeSidebar();
    $('menu-btn').focus();
  });
  $('scrim').addEventListener('click', closeSidebar);

  $('settings-btn').addEventListener('click', openSettings);
  $('size-btn').addEventListener('click', openSettings);
  for (const id of ['set-maxpix', 'set-temp', 'set-maxtok', 'set-system', 'set-apikey']) $(id).addEventListener('input', readSettingsForm);
  $('settings-reset').addEventListener('click', () => {
    settings = { ...DEFAULTS };
    saveSettings();
    syncSettingsForm();
    renderAttachments();
  });

  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || $('settings').open) return;
    if (active) {
      e.preventDefault();
      stopActive();
    } else closeSidebar();
  });

  // Paste images anywhere on the page.
  document.addEventListener('paste', (e) => {
    const files = [...(e.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/') || isVideoFile(f.type, f.name));
    if (files.length) {
      e.preventDefault();
      addFiles(files);
    }
  });

  // Drag and drop anywhere on the page.
  let depth = 0;
  const overlay = $('drop-overlay');
  const hasFiles = (e) => [...(e.dataTransfer?.types ?? [])].includes('Files');
  window.addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth++;
    overlay.hidden = false;
  });
  window.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  });
  window.addEventListener('dragleave', () => {
    depth = Math.max(0, depth - 1);
    if (!depth) overlay.hidden = true;
  });
  window.addEventListener('drop', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    overlay.hidden = true;
    addFiles(e.dataTransfer.files);
  });

  $('chat').addEventListener('scroll', () => (autoStick = nearBottom()), { passive: true });

  // Refresh relative times now and then.
  setInterval(renderSidebar, 60000);

  current = null;
  renderAll();
  pollHealth();
  document.documentElement.dataset.ready = 'true';
}

init();
