// Browser tests of the qvl web UI: playwright-core drives the system Chromium (headless) against
// either the mock server (default) or a real `qvl serve` (QVL_BROWSER_SERVER=real).
// Prints one line per test and finally "browser: N passed, N failed"; exits non-zero on failure.
// Screenshots go to build/browser-artifacts/. Run through ./run.sh (it installs nothing; see there).
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(here, '../..');
const ART = path.join(ROOT, 'build/browser-artifacts');
const MODE = process.env.QVL_BROWSER_SERVER === 'real' ? 'real' : 'mock';
const CHROMIUM = process.env.QVL_CHROMIUM || '/usr/bin/chromium';
const ONLY = process.env.QVL_BROWSER_ONLY ? new RegExp(process.env.QVL_BROWSER_ONLY) : null;
const TEST_TIMEOUT_MS = MODE === 'real' ? 120000 : 30000;
const DESKTOP = { width: 1280, height: 820 };
const PHONE = { width: 390, height: 844 };

fs.mkdirSync(ART, { recursive: true });
for (const f of fs.readdirSync(ART)) if (f.endsWith('.png')) fs.rmSync(path.join(ART, f));

// ---- Server ------------------------------------------------------------------------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitHealthy(base, ms, proc) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (proc.exitCode !== null) throw new Error(`server exited with ${proc.exitCode}`);
    try {
      const r = await fetch(base + '/health');
      if (r.ok) return;
    } catch {
      /* not up yet */
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`server at ${base} not healthy after ${ms} ms`);
}

async function startServer() {
  const port = await freePort();
  let proc;
  const log = fs.createWriteStream(path.join(ART, `server-${MODE}.log`));
  if (MODE === 'real') {
    const qvl = path.resolve(ROOT, process.env.QVL_BIN || 'qvl');
    proc = spawn(
      qvl,
      ['serve', '-m', 'tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf', '--mmproj', 'tests/fixtures/models/e2e/gguf/mmproj-e2e-F16.gguf', '--port', String(port), '--max-video-mb', String(VIDEO_MAX_MB)],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
  } else {
    proc = spawn(process.execPath, [path.join(here, 'mock_server.mjs'), '--port', String(port)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  }
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base, MODE === 'real' ? 120000 : 10000, proc);
  return { base, proc };
}

// ---- Tiny test runner --------------------------------------------------------------------------

const tests = [];
function test(name, fn, opts = {}) {
  tests.push({ name, fn, ...opts });
}
class Skip extends Error {}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function eq(a, b, msg) {
  if (a !== b) throw new Error(`${msg}: expected ${JSON.stringify(b)}, got ${JSON.stringify(a)}`);
}

let server;
let browser;
let openedPages = []; // every page of the running test; their console errors fail the test
let sceneBuf; // PNG of the synthetic scene (800×500)

async function mock(pathname, body) {
  if (MODE !== 'mock') throw new Skip('needs the mock server');
  const r = await fetch(server.base + pathname, body === undefined ? {} : { method: 'POST', body: JSON.stringify(body) });
  return r.json();
}

async function newPage(viewport = DESKTOP, opts = {}) {
  const context = await browser.newContext({
    viewport,
    deviceScaleFactor: opts.scale ?? 1,
    colorScheme: opts.colorScheme ?? 'light',
    reducedMotion: 'reduce',
    bypassCSP: !!opts.bypassCSP,
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.base });
  const page = await context.newPage();
  page.errors = [];
  openedPages.push(page);
  page.on('pageerror', (e) => page.errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) page.errors.push(m.text());
  });
  // A real model (even the tiny fixture one) writes until max_tokens; keep answers short there
  // unless a test changes the setting (only set when absent, so changes survive a reload).
  if (MODE === 'real')
    await page.addInitScript(() => {
      if (!localStorage.getItem('qvl.settings.v1')) localStorage.setItem('qvl.settings.v1', JSON.stringify({ maxTokens: 48 }));
    });
  if (opts.init) await page.addInitScript(opts.init.fn, opts.init.arg);
  if (opts.before) await opts.before(page);
  await page.goto(server.base + '/');
  await page.waitForSelector('html[data-ready="true"]');
  return page;
}

async function shot(page, name) {
  await page.waitForTimeout(120);
  await page.screenshot({ path: path.join(ART, `${name}.png`) });
}

async function addScene(page, name = 'scene.png') {
  await page.setInputFiles('#file-input', { name, mimeType: 'image/png', buffer: sceneBuf });
  await page.waitForSelector('.att');
}

// Text of the last answer once it has stopped streaming.
async function waitAnswerDone(page, n) {
  await page.waitForFunction((k) => {
    const a = document.querySelectorAll('.msg.assistant');
    return a.length >= k && a[k - 1].getAttribute('aria-busy') === 'false';
  }, n, { timeout: TEST_TIMEOUT_MS - 5000 });
  return page.locator('.msg.assistant').nth(n - 1);
}

// Draws the scene the mock's canned grounding answer describes: a red circle, a blue square, a
// green triangle and a small yellow sun on an 800×500 gradient.
async function makeScene() {
  const page = await browser.newPage();
  const dataUrl = await page.evaluate(() => {
    const c = document.createElement('canvas');
    c.width = 800;
    c.height = 500;
    const g = c.getContext('2d');
    const bg = g.createLinearGradient(0, 0, 0, 500);
    bg.addColorStop(0, '#cfe6ff');
    bg.addColorStop(1, '#f4f9ff');
    g.fillStyle = bg;
    g.fillRect(0, 0, 800, 500);
    g.fillStyle = '#dfeedd';
    g.fillRect(0, 430, 800, 70);
    g.fillStyle = '#e5484d';
    g.beginPath();
    g.arc(180, 160, 80, 0, Math.PI * 2);
    g.fill();
    g.fillStyle = '#3e63dd';
    g.fillRect(340, 180, 160, 160);
    g.fillStyle = '#30a46c';
    g.beginPath();
    g.moveTo(680, 200);
    g.lineTo(760, 420);
    g.lineTo(600, 420);
    g.closePath();
    g.fill();
    g.fillStyle = '#f5c400';
    g.beginPath();
    g.arc(700, 90, 22, 0, Math.PI * 2);
    g.fill();
    return c.toDataURL('image/png');
  });
  await page.close();
  return Buffer.from(dataUrl.split(',')[1], 'base64');
}

// ---- Tests -------------------------------------------------------------------------------------

test('smart_resize in the page matches every fixture case', async () => {
  const cases = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/fixtures/preprocess/smart_resize.json'), 'utf8')).cases;
  const page = await newPage();
  const got = await page.evaluate(async (cs) => {
    const { smartResize } = await import('/lib.js');
    return cs.map((c) => smartResize(c.height, c.width, c.min_pixels, c.max_pixels));
  }, cases);
  assert(cases.length >= 20, `only ${cases.length} fixture cases`);
  cases.forEach((c, i) => {
    const g = got[i];
    const what = `${c.height}x${c.width} min ${c.min_pixels} max ${c.max_pixels}`;
    if (c.error) assert(g.error, `${what}: expected an error, got ${JSON.stringify(g)}`);
    else {
      eq(g.height, c.resized_height, `${what} height`);
      eq(g.width, c.resized_width, `${what} width`);
      eq(g.tokens, c.n_image_tokens, `${what} tokens`);
    }
  });
  await page.context().close();
});

test('grounding parser and SSE parser', async () => {
  const page = await newPage();
  const r = await page.evaluate(async () => {
    const { parseGrounding, createSSEParser, describeHttpError } = await import('/lib.js');
    const out = {};
    out.fenced = parseGrounding('Sure:\n```json\n[{"bbox_2d": [10, 20, 300, 400], "label": "cat"}, {"point_2d": [500, 600], "label": "dot"}]\n```\nDone.');
    out.cut = parseGrounding('```json\n[{"bbox_2d": [1, 2, 3, 4], "label": "a"}, {"bbox_2d": [5, 6, 7, 8], "label": "b"}, {"bbox_2d": [9, 1');
    out.bare = parseGrounding('{"bbox_2d": [900, 900, 100, 100], "text_content": "EXIT"}');
    out.outOfRange = parseGrounding('[{"bbox_2d": [-5, 0, 1200, 1000], "label": "x"}]');
    out.none = parseGrounding('A cat sits on a mat. No boxes here.');
    out.bad = parseGrounding('[{"bbox_2d": [1, 2, 3], "label": "three numbers"}, {"bbox_2d": ["a", 2, 3, 4]}]');
    const events = [];
    const p = createSSEParser((d) => events.push(d));
    const stream = 'data: {"a":1}\n\n: ping\n\ndata: {"b"\r\n\r\ndata: x\ndata: y\n\ndata: [DONE]\n\n';
    for (const ch of stream) p.push(ch); // worst case: one character at a time
    p.end();
    out.events = events;
    out.busy = describeHttpError(503, { message: 'queue full' }, '12');
    out.loading = describeHttpError(503, null, null);
    out.large = describeHttpError(413, { message: 'image has 50000000 pixels' }, null);
    return out;
  });
  eq(JSON.stringify(r.fenced), JSON.stringify([{ kind: 'box', x1: 10, y1: 20, x2: 300, y2: 400, label: 'cat' }, { kind: 'point', x: 500, y: 600, label: 'dot' }]), 'fenced list');
  eq(r.cut.length, 2, 'truncated list keeps complete objects');
  eq(JSON.stringify(r.bare), JSON.stringify([{ kind: 'box', x1: 100, y1: 100, x2: 900, y2: 900, label: 'EXIT' }]), 'bare object, swapped corners, text_content');
  eq(JSON.stringify(r.outOfRange[0]), JSON.stringify({ kind: 'box', x1: 0, y1: 0, x2: 1000, y2: 1000, label: 'x' }), 'clamped to the grid');
  eq(r.none.length, 0, 'no grounding in prose');
  eq(r.bad.length, 0, 'malformed boxes ignored');
  eq(JSON.stringify(r.events), JSON.stringify(['{"a":1}', '{"b"', 'x\ny', '[DONE]']), 'SSE events');
  eq(r.busy.kind, 'busy', '503 + Retry-After');
  eq(r.busy.retryAfter, 12, 'retry after');
  eq(r.loading.kind, 'loading', '503 without Retry-After');
  eq(r.loading.retryAfter, 5, 'loading is retried');
  eq(r.large.kind, 'too_large', '413');
  await page.context().close();
});

test('video helpers: which files are videos, strip times, the video_url part, a video 413', async () => {
  const page = await newPage();
  const r = await page.evaluate(async () => {
    const { isVideoFile, formatSeconds, buildMessages, describeHttpError, rgbToRgba } = await import('/lib.js');
    return {
      kinds: [
        ['video/mp4', 'a.mp4'], ['video/webm', 'a.webm'], ['', 'clip.MKV'], ['application/octet-stream', 'a.mov'],
        ['image/gif', 'a.gif'], ['image/png', 'a.png'], ['', 'notes.txt'], ['video/x-msvideo', 'a.avi'],
      ].map(([t, n]) => isVideoFile(t, n)),
      times: [0, 0.6666666666666666, 1.9166666666666667, 9.999, 12.25, 59.96, 65.04, 119.97].map(formatSeconds),
      msgs: buildMessages({ messages: [{ role: 'user', text: 'When?', images: [
        { kind: 'video', dataUrl: 'data:video/mp4;base64,AAAA' }, { dataUrl: 'data:image/png;base64,BBBB' }] }] }, ''),
      v413: describeHttpError(413, { message: 'The video is 40.0 MiB; this server takes videos up to 32 MiB (--max-video-mb).' }, null, 'video'),
      rgba: [...rgbToRgba(new Uint8Array([1, 2, 3, 4, 5, 6]), 2, 1)],
    };
  });
  eq(JSON.stringify(r.kinds), JSON.stringify([true, true, true, true, true, false, false, false]), 'video files');
  eq(JSON.stringify(r.times), JSON.stringify(['0.00 s', '0.67 s', '1.92 s', '10.0 s', '12.3 s', '1:00.0', '1:05.0', '2:00.0']), 'strip times');
  eq(JSON.stringify(r.msgs[0].content), JSON.stringify([
    { type: 'video_url', video_url: { url: 'data:video/mp4;base64,AAAA' } },
    { type: 'image_url', image_url: { url: 'data:image/png;base64,BBBB' } },
    { type: 'text', text: 'When?' },
  ]), 'media in the order added, then the text');
  eq(r.v413.title, 'Video too large', '413 of a video');
  assert(r.v413.detail.includes('--max-video-mb') && !/Max image size/.test(r.v413.detail), `413 detail: ${r.v413.detail}`);
  eq(JSON.stringify(r.rgba), JSON.stringify([1, 2, 3, 255, 4, 5, 6, 255]), 'rgb24 to RGBA');
  await page.context().close();
});

test('empty state looks right (desktop and phone)', async () => {
  const page = await newPage();
  await page.waitForSelector('.status[data-state="ready"]');
  assert(await page.isVisible('#dropzone'), 'drop zone visible');
  eq(await page.locator('.preset-card[data-preset]').count(), 4, 'preset cards');
  eq(await page.locator('.preset-card.extract-toggle').count(), 1, 'the table card');
  await shot(page, 'desktop-empty');
  await page.context().close();
  const phone = await newPage(PHONE, { scale: 2 });
  await phone.waitForSelector('.status[data-state="ready"]');
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert(overflow <= 0, `page scrolls sideways by ${overflow}px on a phone`);
  await shot(phone, 'phone-empty');
  await phone.context().close();
});

// The heading of the empty state is on screen when the page opens, below the top bar, at both
// widths (a phone's empty state is taller than its screen).
async function headingVisible(page, what) {
  const r = await page.evaluate(() => {
    const h = document.getElementById('empty-title').getBoundingClientRect();
    const bar = document.querySelector('.topbar').getBoundingClientRect();
    return { top: h.top, bottom: h.bottom, barBottom: bar.bottom, scroll: document.getElementById('chat').scrollTop, vh: window.innerHeight };
  });
  assert(r.top >= r.barBottom && r.bottom <= r.vh, `${what}: the heading is at ${r.top}..${r.bottom}px, the top bar ends at ${r.barBottom}px (chat scrolled ${r.scroll}px)`);
  eq(r.scroll, 0, `${what}: the empty state is scrolled`);
}

test('the page opens at the top: the heading is visible at load (desktop and phone)', async () => {
  for (const [vp, name] of [[DESKTOP, 'desktop'], [PHONE, 'phone']]) {
    const page = await newPage(vp, { scale: vp === PHONE ? 2 : 1 });
    await page.waitForSelector('.status[data-state="ready"]');
    await headingVisible(page, `${name} at load`);
    const overflow = await page.evaluate(() => { const c = document.getElementById('chat'); return c.scrollHeight - c.clientHeight; });
    if (vp === PHONE) assert(overflow > 0, `the phone's empty state fits its screen (${overflow}px): this test would not see the scroll`);
    // "New conversation" from a conversation with messages opens at the top too.
    await page.fill('#prompt', 'Hello');
    await page.keyboard.press('Enter');
    await waitAnswerDone(page, 1);
    if (vp === PHONE) await page.click('#menu-btn');
    await page.click('#new-chat');
    await headingVisible(page, `${name} after New conversation`);
    await shot(page, `${name}-opens-at-top`);
    await page.context().close();
  }
});

// A reply of POST /video/frames (docs/WEB_UI.md) for a clip of `groups` temporal groups of two
// frames, 160×90 thumbnails each a different shade, served by request interception so that the
// tests of the strip's layout run against either server.
function cannedFrames(groups) {
  const fps = 24;
  const frames = [];
  const data = [];
  for (let i = 0; i < groups * 2; i++) {
    const index = i * 12;
    frames.push({ index, time_s: index / fps, group: Math.floor(i / 2) });
    const px = Buffer.alloc(160 * 90 * 3);
    for (let k = 0; k < px.length; k += 3) [px[k], px[k + 1], px[k + 2]] = [(i * 37) % 256, (k / 3) % 160, 200 - i * 9];
    data.push(px.toString('base64'));
  }
  const groupsOut = Array.from({ length: groups }, (_, g) => ({ time_s: frames[2 * g].time_s, text: `<${(frames[2 * g].time_s).toFixed(1)} seconds>` }));
  return {
    width: 1280, height: 720, fps, duration_s: (groups * 24) / fps, total_frames: groups * 24,
    video_tokens: groups * 60, resized_width: 320, resized_height: 192, frames, groups: groupsOut,
    thumbnails: { width: 160, height: 90, data },
  };
}

async function attachCannedVideo(page, groups, name = 'clip.mp4') {
  await page.route('**/video/frames', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(cannedFrames(groups)) }));
  await page.setInputFiles('#file-input', { name, mimeType: 'video/mp4', buffer: Buffer.from('not decoded: /video/frames is answered by the test') });
  await page.waitForSelector('.att-video.att-ready');
}

// Every task card is on screen as the page shows it (no scrolling), not covered, and answers a click.
async function cardsUsable(page, what) {
  const cards = page.locator('.preset-card');
  const n = await cards.count();
  assert(n >= 4, `${what}: ${n} task cards`);
  for (let i = 0; i < n; i++) {
    const r = await cards.nth(i).evaluate((c) => {
      const b = c.getBoundingClientRect();
      const chat = document.getElementById('chat').getBoundingClientRect();
      const hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
      return { top: b.top, bottom: b.bottom, chatTop: chat.top, chatBottom: chat.bottom, height: b.height, hit: hit && c.contains(hit), at: hit ? hit.className || hit.tagName : null };
    });
    assert(r.height > 30, `${what}: card ${i} is ${r.height}px tall`);
    assert(r.top >= r.chatTop && r.bottom <= r.chatBottom, `${what}: card ${i} (${r.top}..${r.bottom}px) outside the visible chat area (${r.chatTop}..${r.chatBottom}px)`);
    assert(r.hit, `${what}: card ${i} is covered by ${r.at}`);
  }
  await page.locator('.preset-card[data-preset="describe"]').click({ timeout: 3000 });
  eq(await page.inputValue('#prompt'), 'Describe this image in detail.', `${what}: the Describe card fills the prompt`);
}

test('attaching before the first question keeps the task cards usable (desktop and phone)', async () => {
  for (const [vp, name] of [[DESKTOP, 'desktop'], [PHONE, 'phone']]) {
    const page = await newPage(vp, { scale: vp === PHONE ? 2 : 1 });
    await attachCannedVideo(page, 6);
    await cardsUsable(page, `${name}, a video attached`);
    await shot(page, `${name}-video-before-question`);
    await page.fill('#prompt', '');
    await addScene(page);
    await cardsUsable(page, `${name}, a video and an image attached`);
    await shot(page, `${name}-attached-before-question`);
    await page.context().close();
  }
});

test('"Extract as table" is a task card beside the others (desktop and phone)', async () => {
  for (const [vp, name] of [[DESKTOP, 'desktop'], [PHONE, 'phone']]) {
    const page = await newPage(vp, { scale: vp === PHONE ? 2 : 1 });
    const r = await page.evaluate(() => {
      const grid = document.querySelector('#empty .preset-cards');
      const table = [...document.querySelectorAll('#empty .extract-toggle')];
      const others = [...grid.querySelectorAll('.preset-card[data-preset]')];
      const box = (e) => { const b = e.getBoundingClientRect(); return { top: Math.round(b.top), left: Math.round(b.left), height: Math.round(b.height), width: Math.round(b.width) }; };
      return { n: table.length, inGrid: table.length === 1 && table[0].parentElement === grid, table: table[0] && box(table[0]), others: others.map(box) };
    });
    eq(r.n, 1, `${name}: table actions in the empty state`);
    assert(r.inGrid, `${name}: the table action is not in the grid of task cards`);
    if (vp === DESKTOP) {
      for (const [i, o] of r.others.entries()) {
        eq(r.table.top, o.top, `${name}: top of the table card against card ${i}`);
        eq(r.table.height, o.height, `${name}: height of the table card against card ${i}`);
      }
      assert(r.table.left > Math.max(...r.others.map((o) => o.left)), `${name}: the table card is not after the others in the row`);
    } else {
      // Two columns: it closes the grid, right under the last row, as wide as the grid.
      const lastBottom = Math.max(...r.others.map((o) => o.top + o.height));
      assert(r.table.top > lastBottom && r.table.top - lastBottom <= 16, `${name}: the table card at ${r.table.top}px is not right under the cards (end at ${lastBottom}px)`);
    }
    await page.locator('#empty .extract-toggle').click();
    assert(await page.isVisible('#extract-cols'), `${name}: the card opens the columns field`);
    eq(await page.locator('#empty .extract-toggle').getAttribute('aria-expanded'), 'true', `${name}: aria-expanded`);
    await shot(page, `${name}-table-card`);
    await page.context().close();
  }
});

// A PNG no earlier test sent (so no cache holds it): a gradient whose colours come from the clock.
async function freshImage(page) {
  const seed = Date.now() % 997;
  const url = await page.evaluate((k) => {
    const c = document.createElement('canvas');
    c.width = 320;
    c.height = 200;
    const g = c.getContext('2d');
    const grad = g.createLinearGradient(0, 0, 320, 200);
    grad.addColorStop(0, `hsl(${k % 360} 70% 50%)`);
    grad.addColorStop(1, `hsl(${(k * 7) % 360} 60% 70%)`);
    g.fillStyle = grad;
    g.fillRect(0, 0, 320, 200);
    g.fillStyle = '#fff';
    g.fillRect(20 + (k % 200), 40, 60, 60);
    return c.toDataURL('image/png');
  }, seed);
  return Buffer.from(url.split(',')[1], 'base64');
}

test('cache badges: none on a first question, the reused tokens on a follow-up (desktop and phone)', async () => {
  if (MODE === 'mock') await mock('/__mock/reset', {});
  // An earlier request leaves the chat template's header in the server's prefix cache, so the
  // first question below gets cached tokens and prefix_cache_hit: true without reusing anything.
  const warm = await fetch(server.base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
  eq(warm.status, 200, 'warm-up request');
  for (const [vp, name] of [[DESKTOP, 'desktop'], [PHONE, 'phone']]) {
    const page = await newPage(vp, { scale: vp === PHONE ? 2 : 1 });
    await page.setInputFiles('#file-input', { name: 'fresh.png', mimeType: 'image/png', buffer: await freshImage(page) });
    await page.waitForSelector('.att');
    await page.fill('#prompt', 'What colour is it?');
    await page.keyboard.press('Enter');
    const first = await waitAnswerDone(page, 1);
    const saved = () => page.evaluate(() => JSON.parse(localStorage.getItem('qvl.conversations.v1'))[0].messages);
    const t1 = (await saved())[1].timings;
    assert(t1 && t1.prefix_cache_hit === true && t1.cached_prompt_tokens > 0, `${name}: the first question did not hit the header in the cache (${JSON.stringify(t1)}): this test would not see a wrong badge`);
    eq(await first.locator('.badge-reuse').count(), 0, `${name}: a cache badge on the first question`);
    const meta1 = await first.locator('.meta').textContent();
    assert(!/cache|reused/i.test(meta1), `${name}: the first answer speaks of a cache: ${meta1}`);
    await page.fill('#prompt', 'And the square?');
    await page.keyboard.press('Enter');
    const second = await waitAnswerDone(page, 2);
    const t2 = (await saved())[3].timings;
    assert(t2.cached_prompt_tokens > 3, `${name}: the follow-up reused ${t2.cached_prompt_tokens} tokens`);
    const badge = second.locator('.badge-reuse');
    eq(await badge.count(), 1, `${name}: cache badges on the follow-up`);
    eq(await badge.textContent(), `reused ${t2.cached_prompt_tokens.toLocaleString('en-US')} tokens of this conversation`, `${name}: the follow-up's badge`);
    assert(await badge.isVisible(), `${name}: the badge is not visible`);
    await shot(page, `${name}-cache-badge`);
    await page.context().close();
  }
});

// A stored answer with every timing the server sends (docs/API.md), as a reload shows it.
function seedTimings(dataUrl) {
  const now = Date.now();
  localStorage.setItem('qvl.conversations.v1', JSON.stringify([{ id: 'timed', title: 'What is this?', created: now, updated: now, messages: [
    { role: 'user', text: 'What is this?', images: [{ name: 'scene.png', type: 'image/png', bytes: 1000, dataUrl, width: 800, height: 500 }], at: now },
    { role: 'assistant', text: 'A red circle, a blue square and a green triangle.', at: now,
      usage: { prompt_tokens: 431, completion_tokens: 12, total_tokens: 443, prompt_tokens_details: { cached_tokens: 3 } },
      timings: { ttft_ms: 412.5, prefill_tok_s: 34965.2, decode_tok_s: 19.46, image_tokens: 400, image_cache_hit: false, prefix_cache_hit: true,
        cached_prompt_tokens: 3, queue_ms: 0.3, prompt_ms: 61, setup_ms: 0.8, preprocess_ms: 48.2, vision_ms: 3151.9, prefill_ms: 312.4, decode_ms: 565 } },
  ] }]));
}

test('timings: closed under "Details", in plain words when opened (desktop and phone)', async () => {
  const init = { fn: seedTimings, arg: 'data:image/png;base64,' + sceneBuf.toString('base64') };
  for (const [vp, name] of [[DESKTOP, 'desktop'], [PHONE, 'phone']]) {
    const page = await newPage(vp, { init, scale: vp === PHONE ? 2 : 1 });
    if (vp === PHONE) await page.click('#menu-btn');
    await page.click('.conv-open');
    const answer = page.locator('.msg.assistant').first();
    const summary = answer.locator('.timings summary');
    await summary.waitFor();
    eq(await summary.textContent(), 'Details', `${name}: the toggle`);
    eq(await answer.locator('.t-item:visible').count(), 0, `${name}: timings shown before the toggle is opened`);
    const shown = await answer.locator('.meta').innerText();
    assert(!/tok\/s|prefill|token|cache/i.test(shown), `${name}: jargon in the closed footer: ${shown}`);
    await shot(page, `${name}-timings-closed`);
    await summary.click();
    const items = await answer.locator('.t-item:visible').allInnerTexts();
    eq(JSON.stringify(items), JSON.stringify([
      'first word after 0.4 s',
      'the image counts as 400 tokens',
      'read the image in 3.2 s',
      'read 428 tokens of question and history in 0.3 s',
      'wrote 12 tokens, 19.5 a second',
    ]), `${name}: the details in plain words`);
    assert(!items.some((t) => /tok\/s|prefill|ttft|decode|cache hit/i.test(t)), `${name}: jargon in the details: ${items}`);
    await shot(page, `${name}-timings-open`);
    await summary.click();
    eq(await answer.locator('.t-item:visible').count(), 0, `${name}: closed again`);
    // The keyboard opens it too.
    await summary.focus();
    await page.keyboard.press('Enter');
    eq(await answer.locator('.t-item:visible').count(), 5, `${name}: opened with Enter`);
    await page.context().close();
  }
});

// The scroll affordance of a frame strip: whether it overflows, the arrow and the fades as shown.
async function stripState(scroller) {
  // As painted: after a whole frame (the affordance follows the strip's size from a ResizeObserver,
  // which runs after layout, before paint).
  await scroller.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return scroller.evaluate((box) => {
    const strip = box.querySelector('.frame-strip');
    const arrow = box.querySelector('.strip-more');
    const a = arrow.getBoundingClientRect();
    const b = box.getBoundingClientRect();
    const hit = a.width ? document.elementFromPoint(a.left + a.width / 2, a.top + a.height / 2) : null;
    return {
      overflow: strip.scrollWidth - strip.clientWidth,
      scrollLeft: strip.scrollLeft,
      snap: getComputedStyle(strip).scrollSnapType,
      arrow: a.width > 0 && a.height > 0 && a.right <= b.right + 1 && !!hit && arrow.contains(hit),
      fadeRight: Number(getComputedStyle(box, '::after').opacity),
      fadeLeft: Number(getComputedStyle(box, '::before').opacity),
    };
  });
}

test('the frame strip shows that it scrolls: fade, arrow, snap (phone and desktop)', async () => {
  for (const [vp, name] of [[PHONE, 'phone'], [DESKTOP, 'desktop']]) {
    const page = await newPage(vp, { scale: vp === PHONE ? 2 : 1 });
    // Two groups fit a desktop's attachment card: no affordance there. Six overflow everywhere.
    if (vp === DESKTOP) {
      await attachCannedVideo(page, 2, 'short.mp4');
      const st = await stripState(page.locator('.att-video .frame-scroller'));
      assert(st.overflow <= 0, `${name}: two groups overflow by ${st.overflow}px`);
      assert(!st.arrow && st.fadeRight === 0 && st.fadeLeft === 0, `${name}: an affordance on a strip that does not scroll: ${JSON.stringify(st)}`);
      await page.click('button[aria-label="Remove short.mp4"]');
      await page.unroute('**/video/frames');
    }
    await attachCannedVideo(page, 6);
    const box = page.locator('.att-video .frame-scroller');
    let st = await stripState(box);
    assert(st.overflow > 0, `${name}: six groups do not overflow the card (${st.overflow}px)`);
    assert(st.arrow, `${name}: no visible arrow on a strip that scrolls: ${JSON.stringify(st)}`);
    eq(st.fadeRight, 1, `${name}: the fade at the right edge`);
    eq(st.fadeLeft, 0, `${name}: a fade at the left edge before scrolling`);
    assert(/^x( proximity| mandatory)?$/.test(st.snap), `${name}: scroll-snap-type ${st.snap}`);
    await shot(page, `${name}-strip-affordance`);
    await box.locator('.strip-more').click();
    await page.waitForFunction(() => document.querySelector('.att-video .frame-strip').scrollLeft > 0);
    await page.waitForFunction(() => document.querySelector('.att-video .frame-scroller').classList.contains('more-left'));
    eq((await stripState(box)).fadeLeft, 1, `${name}: the fade at the left edge after scrolling`);
    await box.locator('.frame-strip').evaluate((s) => (s.scrollLeft = s.scrollWidth));
    await page.waitForFunction(() => !document.querySelector('.att-video .frame-scroller').classList.contains('more-right'));
    st = await stripState(box);
    assert(!st.arrow && st.fadeRight === 0, `${name}: the affordance stays at the end of the strip: ${JSON.stringify(st)}`);
    // The strip under the question, in the bubble, has it too.
    await page.fill('#prompt', 'What happens?');
    await page.keyboard.press('Enter');
    await waitAnswerDone(page, 1);
    const sent = page.locator('.msg.user .frame-scroller');
    await sent.scrollIntoViewIfNeeded();
    st = await stripState(sent);
    if (vp === PHONE || st.overflow > 0) {
      assert(st.overflow > 0, `${name}: the strip in the bubble does not overflow`);
      assert(st.arrow && st.fadeRight === 1, `${name}: no affordance on the strip in the bubble: ${JSON.stringify(st)}`);
    }
    await shot(page, `${name}-strip-in-bubble`);
    page.allowErrors = [/video/i]; // against the real server the canned clip is no video: an error card answers
    await page.context().close();
  }
});

test('add, measure and remove images (picker, drop, paste)', async () => {
  const page = await newPage();
  await addScene(page);
  // 800×500 at the default 1024-token cap: 512×800 → 16·25 = 400 tokens (computed by hand, §3.2).
  const meta = await page.textContent('.att .att-meta');
  assert(meta.includes('800×500') && meta.includes('400 tokens'), `attachment meta: ${meta}`);
  assert(await page.getAttribute('.att-thumb', 'alt') === 'scene.png', 'thumbnail alt text');
  // At 256 tokens: beta = sqrt(400000/262144); 500/beta/32 → 12, 800/beta/32 → 20: 240 tokens.
  await page.click('#settings-btn');
  await page.selectOption('#set-maxpix', '262144');
  await page.keyboard.press('Escape');
  assert((await page.textContent('.att .att-meta')).includes('240 tokens'), 'tokens follow the setting');
  eq(await page.textContent('#size-label'), '256', 'size label in the composer');
  // Drop and paste go through DataTransfer like a real drag or clipboard.
  const b64 = sceneBuf.toString('base64');
  await page.evaluate((data) => {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], 'dropped.png', { type: 'image/png' }));
    window.dispatchEvent(new DragEvent('dragenter', { dataTransfer: dt, bubbles: true, cancelable: true }));
    window.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    const dt2 = new DataTransfer();
    dt2.items.add(new File([bytes], 'pasted.png', { type: 'image/png' }));
    document.dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt2, bubbles: true, cancelable: true }));
  }, b64);
  await page.waitForFunction(() => document.querySelectorAll('.att').length === 3);
  assert(await page.isHidden('#drop-overlay'), 'drop overlay hidden after drop');
  // A file that is not an image is refused with a message.
  await page.setInputFiles('#file-input', { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hello') });
  await page.waitForSelector('#toast:not([hidden])');
  assert((await page.textContent('#toast')).includes('not a PNG, JPEG or WebP'), 'toast for a text file');
  await page.click('button[aria-label="Remove dropped.png"]');
  eq(await page.locator('.att').count(), 2, 'one removed');
  const names = await page.locator('.att-name').allTextContents();
  eq(names.join(','), 'scene.png,pasted.png', 'remaining attachments');
  await page.context().close();
});

test('ask about an image: answer streams in as markdown, with timings', async () => {
  if (MODE === 'mock') await mock('/__mock/reset', {});
  const page = await newPage();
  await addScene(page);
  await page.locator('[data-preset="describe"]:visible').click();
  eq(await page.inputValue('#prompt'), 'Describe this image in detail.', 'preset text');
  const samples = [];
  await page.exposeFunction('qvlSample', (n) => samples.push(n));
  await page.evaluate(() => {
    new MutationObserver(() => {
      const md = document.querySelector('.msg.assistant .md');
      if (md && !md.querySelector('.thinking')) window.qvlSample(md.textContent.length);
    }).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
  });
  await page.keyboard.press('Enter');
  await page.waitForSelector('#stop-btn:not([hidden])');
  const answer = await waitAnswerDone(page, 1);
  const text = await answer.locator('.md').textContent();
  assert(text.trim().length > 0, 'answer is empty');
  const distinct = new Set(samples.filter((n) => n > 0));
  if (MODE === 'mock') {
    assert(distinct.size >= 5, `answer did not stream (saw ${distinct.size} partial lengths)`);
    eq(await answer.locator('.md table tbody tr').count(), 3, 'markdown table rows');
    eq(await answer.locator('.md strong').first().textContent(), 'synthetic test scene', 'bold text');
    const timings = await answer.locator('.timings').textContent();
    for (const want of [/^Details/, /first word after \d/, /the image counts as 400 tokens/, /read the image in 0\.04 s/, /wrote \d+ tokens, [\d.,]+ a second/])
      assert(want.test(timings), `timings lack ${want}: ${timings}`);
    eq(await answer.locator('.badge-reuse').count(), 0, 'a cache badge on a first question');
    const st = await mock('/__mock/state');
    const body = st.requests[0];
    eq(body.stream, true, 'stream flag');
    eq(body.model, 'qwen3-vl-2b-instruct (mock)', 'model id from /v1/models');
    eq(body.max_pixels, 1048576, 'max_pixels sent');
    eq(body.min_pixels, 65536, 'min_pixels sent');
    const content = body.messages[0].content;
    eq(content[0].type, 'image_url', 'image first');
    assert(content[0].image_url.url.startsWith('data:image/png;base64,'), 'data URL');
    eq(content[1].text, 'Describe this image in detail.', 'prompt text');
  } else {
    assert(distinct.size >= 1, 'no text seen');
    assert((await answer.locator('.timings').count()) === 1, 'timings line');
  }
  assert(await page.isVisible('#send-btn'), 'send button back');
  // Copy puts the raw markdown on the clipboard.
  await answer.locator('.copy-btn').click();
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  eq(clip.trim(), (await page.evaluate(() => JSON.parse(localStorage.getItem('qvl.conversations.v1'))[0].messages[1].text)).trim(), 'copied text');
  await shot(page, 'desktop-answer');
  assert(page.errors.length === 0, `page errors: ${page.errors.join(' | ')}`);
  await page.context().close();
});

test('stop a generation', async () => {
  if (MODE === 'mock') {
    await mock('/__mock/reset', {});
    await mock('/__mock/next', { answer: 'slow' });
  }
  const page = await newPage();
  await addScene(page);
  if (MODE === 'real') {
    await page.click('#settings-btn');
    await page.fill('#set-maxtok', '2000'); // long enough to still be running when Stop is pressed
    await page.keyboard.press('Escape');
  }
  await page.fill('#prompt', 'Tell me a long story about this picture.');
  await page.keyboard.press('Enter');
  // Wait for real tokens (not the "Reading the image…" placeholder) before stopping.
  await page.waitForFunction(() => {
    const md = document.querySelector('.msg.assistant .md');
    return md && !md.querySelector('.thinking') && md.textContent.trim().length > 0;
  }, null, { timeout: TEST_TIMEOUT_MS - 5000 });
  const streaming = await page.isVisible('#stop-btn');
  if (streaming) await page.click('#stop-btn');
  const answer = await waitAnswerDone(page, 1);
  if (MODE === 'mock' || streaming) {
    await answer.locator('.badge', { hasText: 'Stopped' }).waitFor();
    const len = (await answer.locator('.md').textContent()).length;
    await page.waitForTimeout(500);
    eq((await answer.locator('.md').textContent()).length, len, 'text kept growing after Stop');
  }
  assert(await page.isVisible('#send-btn'), 'send button back');
  if (MODE === 'mock') {
    await page.waitForFunction(async (base) => (await (await fetch(base + '/__mock/state')).json()).cancelled === 1, server.base);
    const st = await mock('/__mock/state');
    eq(st.completed, 0, 'the server did not finish the stopped request');
  }
  // The server is still usable: ask again.
  if (MODE === 'real') await page.evaluate(() => localStorage.setItem('qvl.settings.v1', JSON.stringify({ maxTokens: 48 })));
  if (MODE === 'real') await page.reload();
  if (MODE === 'real') await page.click('.conv-open');
  await page.fill('#prompt', 'Short answer please.');
  await page.keyboard.press('Enter');
  await waitAnswerDone(page, 2);
  assert(page.errors.length === 0, `page errors: ${page.errors.join(' | ')}`);
  await page.context().close();
});

test('multi-turn conversation, kept across a reload', async () => {
  if (MODE === 'mock') await mock('/__mock/reset', {});
  const page = await newPage();
  await addScene(page);
  await page.fill('#prompt', 'What shapes do you see?');
  await page.keyboard.press('Enter');
  await waitAnswerDone(page, 1);
  await page.fill('#prompt', 'Which one is the largest round shape?');
  await page.keyboard.press('Enter');
  const second = await waitAnswerDone(page, 2);
  assert((await second.locator('.md').textContent()).length > 0, 'second answer');
  eq(await page.locator('.msg.user').count(), 2, 'two questions shown');
  if (MODE === 'mock') {
    const st = await mock('/__mock/state');
    const m = st.requests[1].messages;
    eq(m.map((x) => x.role).join(','), 'user,assistant,user', 'history sent with the follow-up');
    eq(m[0].content[0].type, 'image_url', 'the image stays in the history');
    assert(m[1].content.includes('synthetic test scene'), 'previous answer sent back');
    const t = await second.locator('.badge-reuse').textContent();
    assert(/^reused [\d,]+ tokens of this conversation$/.test(t), `reuse badge of the follow-up: ${t}`);
  }
  await page.reload();
  await page.waitForSelector('html[data-ready="true"]');
  eq(await page.locator('.conv').count(), 1, 'conversation listed after reload');
  await page.click('.conv-open');
  eq(await page.locator('.msg.assistant').count(), 2, 'answers restored');
  eq(await page.locator('.msg.user img.msg-img').count(), 1, 'image restored');
  await page.fill('#prompt', 'And the colour of the square?');
  await page.keyboard.press('Enter');
  await waitAnswerDone(page, 3);
  if (MODE === 'mock') eq((await mock('/__mock/state')).requests[2].messages.length, 5, 'third request has the whole history');
  await page.context().close();
});

test('grounding answer draws boxes and points over the image', async () => {
  if (MODE !== 'mock') throw new Skip('the canned grounding answer comes from the mock');
  await mock('/__mock/reset', {});
  const page = await newPage();
  await addScene(page);
  await page.locator('[data-preset="ground"]:visible').click();
  // The preset selects "all objects" so that typing replaces it.
  eq(await page.evaluate(() => { const t = document.getElementById('prompt'); return t.value.slice(t.selectionStart, t.selectionEnd); }), 'all objects', 'selected target');
  await page.keyboard.type('shapes and the sun');
  await page.keyboard.press('Enter');
  const answer = await waitAnswerDone(page, 1);
  await answer.locator('.gbox').first().waitFor();
  eq(await answer.locator('.gbox').count(), 3, 'boxes');
  eq(await answer.locator('.gpoint').count(), 1, 'points');
  const labels = await answer.locator('.glabel').allTextContents();
  eq(labels.join(','), 'red circle,blue square,green triangle,sun', 'labels');
  await checkBoxGeometry(answer);
  await shot(page, 'desktop-grounding');
  const sent = (await mock('/__mock/state')).requests[0];
  eq(sent.boxes, true, 'the page asks the server for boxes');
  await page.context().close();
});

test('boxes come from the server: an answer without them draws none, a box on the second image is drawn there', async () => {
  const page = await pageWithConversations((img, now) => [
    { id: 'text-only', title: 'Text only', created: now, updated: now, messages: [
      { role: 'user', text: 'Locate.', images: [img('scene.png')], at: now },
      { role: 'assistant', text: '[{"bbox_2d": [425, 360, 625, 680], "label": "blue square"}]', at: now },
    ] },
    { id: 'first', title: 'On the first image', created: now - 1, updated: now - 1, messages: [
      { role: 'user', text: 'Compare.', images: [img('first.png'), img('second.png')], at: now },
      { role: 'assistant', text: 'see boxes', at: now, boxes: [{ image: 0, label: 'blue square', box: [340, 180, 500, 340] }] },
    ] },
  ]);
  await page.locator('.conv-open').nth(0).click();
  await page.locator('.msg.assistant').first().waitFor();
  eq(await page.locator('.gbox').count(), 0, 'bbox text without server boxes: nothing drawn');
  await page.locator('.conv-open').nth(1).click();
  await page.locator('.gbox').first().waitFor();
  eq(await page.locator('.ground-pick button').nth(0).getAttribute('aria-pressed'), 'true', 'drawn on the image the server named');
  assert((await page.textContent('.ground-caption')).includes('first.png'), 'caption names it');
  await checkBoxGeometry(page.locator('.msg.assistant'), { point: false });
  await page.context().close();
});

// Box positions on screen must be the 0..1000 grid scaled to the image's displayed size.
async function checkBoxGeometry(scope, { point = true } = {}) {
  const img = await scope.locator('.ground-img').boundingBox();
  const boxes = scope.locator('.gbox');
  const box = await boxes.nth((await boxes.count()) > 1 ? 1 : 0).boundingBox(); // blue square [425, 360, 625, 680]
  const near = (a, b, what) => assert(Math.abs(a - b) <= 2.5, `${what}: ${a.toFixed(1)} vs ${b.toFixed(1)}`);
  near(box.x, img.x + (425 / 1000) * img.width, 'left');
  near(box.y, img.y + (360 / 1000) * img.height, 'top');
  near(box.width, (200 / 1000) * img.width, 'width');
  near(box.height, (320 / 1000) * img.height, 'height');
  if (!point) return;
  const pt = await scope.locator('.gpoint').boundingBox(); // sun [875, 180]
  near(pt.x + pt.width / 2, img.x + 0.875 * img.width, 'point x');
  near(pt.y + pt.height / 2, img.y + 0.18 * img.height, 'point y');
}

// What the server's "boxes" extension gives for a canned answer on a w×h image (independent of the
// page and of the mock): each bbox_2d / point_2d on the 0..1000 grid in pixels.
function boxesOf(answer, w, h, image = 0) {
  return [...answer.matchAll(/\{[^{}]*\}/g)].map((m) => JSON.parse(m[0])).map((o) => o.bbox_2d
    ? { image, label: o.label, box: o.bbox_2d.map((v, i) => (v / 1000) * (i % 2 ? h : w)) }
    : { image, label: o.label, point: o.point_2d.map((v, i) => (v / 1000) * (i % 2 ? h : w)) });
}

// A desktop page whose stored conversations (as an earlier visit left them) are convs(img, now):
// img(name) is an attachment of the scene picture under that name, now the time of the seeding.
async function pageWithConversations(convs) {
  const dataUrl = 'data:image/png;base64,' + sceneBuf.toString('base64');
  const img = (name) => ({ name, type: 'image/png', bytes: 1000, dataUrl, width: 800, height: 500 });
  const json = JSON.stringify(convs(img, Date.now()));
  return newPage(DESKTOP, { init: { fn: (j) => localStorage.setItem('qvl.conversations.v1', j), arg: json } });
}

// A stored conversation with a canned grounding answer (and the boxes the server returned with it):
// works against any server.
function seedGrounding({ dataUrl, answer, boxes }) {
  const now = Date.now();
  localStorage.setItem(
    'qvl.conversations.v1',
    JSON.stringify([
      {
        id: 'seed',
        title: 'Find the shapes',
        created: now,
        updated: now,
        messages: [
          { role: 'user', text: 'Locate every shape.', images: [{ name: 'scene.png', type: 'image/png', bytes: 1000, dataUrl, width: 800, height: 500 }], at: now },
          { role: 'assistant', text: answer, boxes, at: now, usage: { completion_tokens: 96 }, timings: { ttft_ms: 812, prefill_tok_s: 512.4, decode_tok_s: 21.7, image_tokens: 400, image_cache_hit: false, prefix_cache_hit: false } },
        ],
      },
    ]),
  );
}

test('box overlay from a canned answer, at desktop and phone sizes', async () => {
  const answer =
    'Here are the objects I found:\n\n```json\n[\n  {"bbox_2d": [125, 160, 325, 480], "label": "red circle"},\n  {"bbox_2d": [425, 360, 625, 680], "label": "blue square"},\n' +
    '  {"bbox_2d": [750, 400, 950, 840], "label": "green triangle"},\n  {"point_2d": [875, 180], "label": "sun"}\n]\n```';
  const init = {
    fn: seedGrounding,
    arg: { dataUrl: 'data:image/png;base64,' + sceneBuf.toString('base64'), answer, boxes: boxesOf(answer, 800, 500) },
  };
  for (const [vp, name] of [[DESKTOP, 'desktop'], [PHONE, 'phone']]) {
    const page = await newPage(vp, { init, scale: vp === PHONE ? 2 : 1 });
    if (vp === PHONE) await page.click('#menu-btn'); // on a phone the list is in a drawer
    await page.click('.conv-open');
    eq(await page.getAttribute('#menu-btn', 'aria-expanded'), 'false', 'drawer closes on choosing');
    const answer = page.locator('.msg.assistant').first();
    await answer.locator('.gbox').first().waitFor();
    await checkBoxGeometry(answer);
    const t = await answer.locator('.timings').textContent();
    for (const want of ['first word after 0.8 s', 'read the question at 512 tokens a second', 'the image counts as 400 tokens', 'wrote 96 tokens, 21.7 a second']) assert(t.includes(want), `timings: "${want}" not in ${t}`);
    await answer.locator('.ground').evaluate((e) => e.scrollIntoView({ block: 'end' }));
    await shot(page, `${name}-grounding-canned`);
    if (vp === PHONE) {
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert(overflow <= 0, `sideways scroll ${overflow}px`);
      await page.click('#menu-btn');
      await page.waitForTimeout(300);
      assert(await page.locator('#sidebar').evaluate((e) => e.getBoundingClientRect().left >= 0), 'drawer opened');
      await shot(page, 'phone-drawer');
      await page.keyboard.press('Escape');
      eq(await page.getAttribute('#menu-btn', 'aria-expanded'), 'false', 'Escape closes the drawer');
    }
    await page.context().close();
  }
});

test('grounding with several images: drawn on the last one, switchable', async () => {
  const page = await pageWithConversations((img, now) => [{ id: 'two', title: 'Two images', created: now, updated: now, messages: [
    { role: 'user', text: 'Compare.', images: [img('first.png'), img('second.png')], at: now },
    { role: 'assistant', text: '[{"bbox_2d": [425, 360, 625, 680], "label": "blue square"}]', at: now,
      boxes: [{ image: 1, label: 'blue square', box: [340, 180, 500, 340] }] },
  ] }]);
  await page.click('.conv-open');
  const pick = page.locator('.ground-pick button');
  eq(await pick.count(), 2, 'one button per image');
  eq(await pick.nth(1).getAttribute('aria-pressed'), 'true', 'the last image is drawn on by default');
  assert((await page.textContent('.ground-caption')).includes('second.png'), 'caption names the image');
  await pick.nth(0).click();
  eq(await page.locator('.ground-pick button').nth(0).getAttribute('aria-pressed'), 'true', 'switched');
  assert((await page.textContent('.ground-caption')).includes('first.png'), 'caption follows');
  await checkBoxGeometry(page.locator('.msg.assistant'), { point: false });
  await page.context().close();
});

test('503 queue full: message, countdown, retry', async () => {
  const page = await newPage();
  let hits = 0;
  await page.route('**/v1/chat/completions', (route) => {
    hits++;
    return route.fulfill({
      status: 503,
      headers: { 'Retry-After': '30', 'Content-Type': 'application/json' },
      body: JSON.stringify({ error: { message: 'The request queue is full (8 waiting).', type: 'server_busy', code: 'queue_full' } }),
    });
  });
  await addScene(page);
  await page.fill('#prompt', 'What is this?');
  await page.keyboard.press('Enter');
  const card = page.locator('.error-card');
  await card.waitFor();
  const text = await card.textContent();
  assert(text.includes('The server is busy') && text.includes('queue is full'), `error text: ${text}`);
  await page.waitForFunction(() => /Retrying in (29|30) s/.test(document.querySelector('.error-card')?.textContent ?? ''));
  eq(await card.getAttribute('role'), 'alert', 'announced as an alert');
  await shot(page, 'desktop-error-503');
  // "Retry now" goes to the server again; once the queue has room the answer comes.
  await page.unroute('**/v1/chat/completions');
  await card.locator('button', { hasText: 'Retry now' }).click();
  const answer = await waitAnswerDone(page, 1);
  eq(await answer.locator('.error-card').count(), 0, 'error gone after a successful retry');
  assert((await answer.locator('.md').textContent()).length > 0, 'answer after retry');
  eq(hits, 1, 'requests that got 503');
  await page.context().close();
});

test('503 with a short Retry-After retries by itself; Cancel stops the countdown', async () => {
  const page = await newPage();
  let hits = 0;
  await page.route('**/v1/chat/completions', (route) => {
    hits++;
    if (hits > 1) return route.continue();
    return route.fulfill({ status: 503, headers: { 'Retry-After': '1', 'Content-Type': 'application/json' }, body: '{"error":{"message":"queue full","type":"server_busy","code":"queue_full"}}' });
  });
  await page.fill('#prompt', 'Hello?');
  await page.keyboard.press('Enter');
  await page.locator('.error-card').waitFor();
  const answer = await waitAnswerDone(page, 1);
  await page.waitForFunction(() => {
    const a = document.querySelector('.msg.assistant');
    return a.getAttribute('aria-busy') === 'false' && !a.querySelector('.error-card') && a.querySelector('.copy-btn');
  }, null, { timeout: 20000 });
  eq(hits, 2, 'one automatic retry');
  assert((await answer.locator('.md').textContent()).length > 0, 'answer after the automatic retry');
  // Cancel: the countdown disappears and nothing is sent when it would have run out.
  await page.unroute('**/v1/chat/completions');
  await page.route('**/v1/chat/completions', (route) => {
    hits++;
    return route.fulfill({ status: 503, headers: { 'Retry-After': '2', 'Content-Type': 'application/json' }, body: '{"error":{"message":"queue full","type":"server_busy","code":"queue_full"}}' });
  });
  await page.fill('#prompt', 'Again?');
  await page.keyboard.press('Enter');
  const card = page.locator('.msg.assistant').nth(1).locator('.error-card');
  await card.locator('button', { hasText: 'Cancel' }).click();
  await page.waitForTimeout(3000);
  eq(hits, 3, 'no retry after Cancel');
  assert(await card.locator('button', { hasText: 'Try again' }).isVisible(), 'manual retry offered');
  await page.context().close();
});

test('413 image too large, and server down', async () => {
  const page = await newPage();
  await page.route('**/v1/chat/completions', (route) =>
    route.fulfill({ status: 413, contentType: 'application/json', body: JSON.stringify({ error: { message: 'Image is 9000×9000 pixels; this server accepts up to 40 MP.', type: 'invalid_request_error', code: 'image_too_large' } }) }),
  );
  await addScene(page);
  await page.fill('#prompt', 'What is this?');
  await page.keyboard.press('Enter');
  const card = page.locator('.error-card');
  await card.waitFor();
  const t = await card.textContent();
  assert(t.includes('Image too large') && t.includes('9000×9000') && t.includes('Max image size'), `413 text: ${t}`);
  await card.locator('button', { hasText: 'Open settings' }).click();
  assert(await page.locator('#settings').evaluate((d) => d.open), 'settings open from the error');
  await page.selectOption('#set-maxpix', '524288');
  await page.click('#settings button[value="done"]');
  assert(!(await page.locator('#settings').evaluate((d) => d.open)), 'Done closes the dialog');
  eq(await page.textContent('#size-label'), '512', 'new size in effect');
  await page.unroute('**/v1/chat/completions');
  await page.route('**/v1/chat/completions', (route) => route.abort('connectionrefused'));
  await page.locator('.error-card button', { hasText: 'Try again' }).click();
  await page.waitForFunction(() => (document.querySelector('.error-card')?.textContent ?? '').includes('reach the qvl server'));
  await page.route('**/health', (route) => route.abort('connectionrefused'));
  await page.locator('.error-card button', { hasText: 'Try again' }).click();
  await page.waitForSelector('.status[data-state="offline"]'); // a failed request re-checks the server
  await shot(page, 'desktop-error-offline');
  await page.context().close();
  // The status pill says so when the server cannot be reached at all.
  const down = await newPage(DESKTOP, { before: (p) => p.route('**/health', (route) => route.abort('connectionrefused')) });
  await down.waitForSelector('.status[data-state="offline"]');
  eq(await down.textContent('#status-text'), 'Server unreachable', 'status text');
  await down.context().close();
});

test('markdown from the model cannot inject HTML or load resources', async () => {
  const page = await newPage();
  const evil =
    'Hi <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script>\n\n[link](javascript:window.pwned=3) ' +
    '![tracker](http://127.0.0.1:9/pixel.png) <iframe src="about:blank"></iframe> <b onclick="window.pwned=4">bold</b>\n\n' +
    '<table><tr><th>OCR</th><th>as HTML</th></tr><tr><td style="color:red">1</td><td>2</td></tr></table>';
  const sse = ['{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', JSON.stringify({ choices: [{ index: 0, delta: { content: evil } }] }), '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', '[DONE]']
    .map((d) => `data: ${d}\n\n`)
    .join('');
  await page.route('**/v1/chat/completions', (route) => route.fulfill({ status: 200, contentType: 'text/event-stream', body: sse }));
  // Chromium reports the handlers and styles in the (inert) markup DOMPurify parses as CSP violations
  // even though nothing runs: a second line of defence, expected here.
  page.allowErrors = [/violates the following Content Security Policy directive '(script|style)-src/];
  await page.fill('#prompt', 'hello');
  await page.keyboard.press('Enter');
  const answer = await waitAnswerDone(page, 1);
  const md = answer.locator('.md');
  eq(await md.locator('img, script, iframe').count(), 0, 'dangerous elements removed');
  eq(await md.locator('[onclick], [onerror]').count(), 0, 'event handlers removed');
  const hrefs = await md.locator('a').evaluateAll((as) => as.map((a) => a.getAttribute('href') ?? ''));
  assert(!hrefs.some((h) => /^javascript:/i.test(h)), `javascript: link kept: ${hrefs}`);
  eq(await md.locator('b').textContent(), 'bold', 'harmless markup kept');
  eq(await md.locator('.table-wrap table td').count(), 2, 'an HTML table (as Qwen OCR may answer) renders as a table');
  eq(await md.locator('[style]').count(), 0, 'style attributes removed');
  await md.locator('b').click();
  eq(await page.evaluate(() => window.pwned ?? null), null, 'no injected code ran');
  await page.context().close();
});

test('keyboard and screen-reader basics; settings dialog', async () => {
  const page = await newPage();
  // Every control has an accessible name.
  const unnamed = await page.evaluate(() =>
    [...document.querySelectorAll('button, input, select, textarea')]
      .filter((e) => e.type !== 'file' && !e.closest('[hidden]'))
      .filter((e) => {
        const byLabel = e.id && document.querySelector(`label[for="${e.id}"]`);
        return !(e.getAttribute('aria-label') || e.textContent.trim() || byLabel || e.getAttribute('aria-labelledby'));
      })
      .map((e) => e.outerHTML.slice(0, 80)),
  );
  eq(unnamed.length, 0, `controls without a name: ${unnamed.join(' | ')}`);
  // Tab reaches the drop zone, the presets and the message box without a mouse.
  const seen = [];
  for (let i = 0; i < 20; i++) {
    await page.keyboard.press('Tab');
    seen.push(await page.evaluate(() => document.activeElement.id || document.activeElement.dataset.preset || document.activeElement.className));
  }
  for (const want of ['dropzone', 'describe', 'prompt', 'settings-btn', 'new-chat']) assert(seen.includes(want), `Tab never reached ${want}: ${seen.join(', ')}`);
  // Settings by keyboard: open, change, Escape closes, focus returns.
  await page.focus('#settings-btn');
  await page.keyboard.press('Enter');
  assert(await page.locator('#settings').evaluate((d) => d.open), 'dialog open');
  await page.fill('#set-system', 'Answer in one sentence.');
  await page.fill('#set-maxtok', '256');
  await page.locator('#set-temp').fill('0.2');
  await shot(page, 'desktop-settings');
  await page.keyboard.press('Escape');
  assert(!(await page.locator('#settings').evaluate((d) => d.open)), 'dialog closed');
  eq(await page.evaluate(() => document.activeElement.id), 'settings-btn', 'focus back on the settings button');
  const s = await page.evaluate(() => JSON.parse(localStorage.getItem('qvl.settings.v1')));
  eq(s.system, 'Answer in one sentence.', 'system prompt saved');
  eq(s.maxTokens, 256, 'max tokens saved');
  eq(s.temperature, 0.2, 'temperature saved');
  if (MODE === 'mock') {
    await mock('/__mock/reset', {});
    await page.fill('#prompt', 'Hello');
    await page.keyboard.press('Enter');
    await waitAnswerDone(page, 1);
    const body = (await mock('/__mock/state')).requests[0];
    eq(body.messages[0].role, 'system', 'system prompt sent');
    eq(body.messages[0].content, 'Answer in one sentence.', 'system text');
    eq(body.max_tokens, 256, 'max_tokens sent');
    eq(body.temperature, 0.2, 'temperature sent');
  }
  await page.context().close();
});

// axe-core's automated WCAG checks on the main states of the page; serious and critical findings fail.
const AXE = fs.readFileSync(path.join(here, 'node_modules/axe-core/axe.min.js'), 'utf8');
async function axe(page, what) {
  const res = await page.evaluate(async (src) => {
    if (!window.axe) (0, eval)(src);
    const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }));
  }, AXE);
  const bad = res.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert(bad.length === 0, `${what}: ${bad.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.join(', ')}`).join('; ')}`);
}

test('accessibility audit (axe-core): empty, conversation, error, settings, phone, dark', async () => {
  // axe is injected with eval, which the page's CSP rightly forbids: this context bypasses CSP.
  const init = {
    fn: seedGrounding,
    arg: {
      dataUrl: 'data:image/png;base64,' + sceneBuf.toString('base64'),
      answer: 'Found:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```json\n[{"bbox_2d": [425, 360, 625, 680], "label": "blue square"}, {"point_2d": [875, 180], "label": "sun"}]\n```',
    },
  };
  init.arg.boxes = boxesOf(init.arg.answer, 800, 500);
  for (const [vp, scheme] of [[DESKTOP, 'light'], [PHONE, 'light'], [DESKTOP, 'dark']]) {
    const page = await newPage(vp, { bypassCSP: true, colorScheme: scheme });
    const tag = `${vp === PHONE ? 'phone' : 'desktop'} ${scheme}`;
    await axe(page, `${tag} empty page`);
    await addScene(page);
    await axe(page, `${tag} image attached`);
    await page.context().close();
    const conv = await newPage(vp, { bypassCSP: true, colorScheme: scheme, init });
    if (vp === PHONE) {
      await conv.click('#menu-btn');
      await conv.waitForTimeout(300);
      await axe(conv, `${tag} drawer open`);
    }
    await conv.click('.conv-open');
    await conv.locator('.gbox').first().waitFor();
    await axe(conv, `${tag} conversation with overlay`);
    await conv.route('**/v1/chat/completions', (route) =>
      route.fulfill({ status: 503, headers: { 'Retry-After': '30', 'Content-Type': 'application/json' }, body: '{"error":{"message":"queue full","type":"server_busy","code":"queue_full"}}' }),
    );
    await conv.fill('#prompt', 'More?');
    await conv.keyboard.press('Enter');
    await conv.locator('.error-card').waitFor();
    await axe(conv, `${tag} 503 error`);
    await conv.click('#settings-btn');
    await axe(conv, `${tag} settings dialog`);
    await conv.context().close();
  }
});

test('phone width: full conversation with overlay', async () => {
  if (MODE === 'mock') await mock('/__mock/reset', {});
  const page = await newPage(PHONE, { scale: 2 });
  await addScene(page);
  await shot(page, 'phone-attached');
  await page.fill('#prompt', 'Locate the shapes and the sun, as JSON boxes.');
  await page.keyboard.press('Enter');
  const answer = await waitAnswerDone(page, 1);
  if (MODE === 'mock') {
    await answer.locator('.gbox').first().waitFor();
    await checkBoxGeometry(answer);
  }
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert(overflow <= 0, `sideways scroll ${overflow}px`);
  await shot(page, 'phone-answer');
  await page.context().close();
});

test('dark theme renders', async () => {
  const answer = 'A **dark** test.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```json\n[{"bbox_2d": [425, 360, 625, 680], "label": "blue square"}]\n```';
  const page = await newPage(DESKTOP, { colorScheme: 'dark', init: { fn: seedGrounding, arg: { dataUrl: 'data:image/png;base64,' + sceneBuf.toString('base64'), answer, boxes: boxesOf(answer, 800, 500) } } });
  await page.click('.conv-open');
  await page.locator('.gbox').first().waitFor();
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert(bg !== 'rgb(244, 245, 249)', `dark background expected, got ${bg}`);
  await shot(page, 'desktop-dark');
  await page.context().close();
});

// ---- Main ----------------------------------------------------------------------------------------

// CSV as RFC 4180 writes it, done here independently of the page's own code.
function csvOf(rows) {
  const f = (s) => (/[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
  return rows.map((r) => r.map(f).join(',')).join('\r\n') + '\r\n';
}

test('extract as table: json_schema request, table of the asked columns, CSV download', async () => {
  if (MODE === 'mock') {
    await mock('/__mock/reset', {});
    await mock('/__mock/next', { answer: 'table' });
  }
  // The real fixture model writes gibberish cells until the grammar lets it stop: give it room.
  const init = { fn: (t) => localStorage.setItem('qvl.settings.v1', JSON.stringify({ maxTokens: t, temperature: 0 })), arg: MODE === 'real' ? 4096 : 1024 };
  const page = await newPage(DESKTOP, { init });
  await addScene(page);
  await page.locator('.extract-toggle:visible').click();
  await page.fill('#extract-cols', 'Item, Price');
  await page.click('#extract-go');
  const answer = await waitAnswerDone(page, 1);
  if ((await answer.locator('.extract-table').count()) === 0)
    throw new Error(`no table; the page shows: ${await answer.textContent()}`);
  const heads = await answer.locator('.extract-table thead th').allTextContents();
  eq(JSON.stringify(heads), JSON.stringify(['Item', 'Price']), 'table columns');
  const cells = await answer.locator('.extract-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  for (const r of cells) eq(r.length, 2, 'cells per row');
  eq(await answer.locator('.extract-table tbody *:not(tr):not(td)').count(), 0, 'model text never becomes elements');
  const [download] = await Promise.all([page.waitForEvent('download'), answer.locator('.extract-csv').click()]);
  eq(download.suggestedFilename(), 'table.csv', 'download name');
  const csv = fs.readFileSync(await download.path(), 'utf8');
  eq(csv, csvOf([heads, ...cells]), 'CSV matches the table');
  if (MODE === 'mock') {
    eq(csv, 'Item,Price\r\n"Apples, red",1.20\r\n"Say ""cheese""",<b>3</b>\r\n"Two\nlines",\r\n', 'CSV of the canned rows');
    const body = (await mock('/__mock/state')).requests[0];
    eq(body.response_format?.type, 'json_schema', 'response_format type');
    eq(body.response_format.json_schema.strict, true, 'strict');
    const items = body.response_format.json_schema.schema.properties.rows.items;
    eq(JSON.stringify(items.required), '["Item","Price"]', 'every column required');
    eq(items.additionalProperties, false, 'no other keys');
    eq(items.properties.Price.type, 'string', 'cells are strings');
    assert(body.messages[0].content[0].type === 'image_url', 'image sent');
  } else {
    const saved = await page.evaluate(() => JSON.parse(localStorage.getItem('qvl.conversations.v1'))[0].messages[1]);
    const parsed = JSON.parse(saved.text); // what the model wrote parses, and the table shows all of it
    eq(parsed.rows.length, cells.length, 'rows shown');
    for (const [i, r] of parsed.rows.entries()) eq(JSON.stringify(Object.keys(r).sort()), '["Item","Price"]', `row ${i} keys`);
  }
  await shot(page, 'desktop-extract-table');
  await page.context().close();
});

test('extract as table cut by max tokens: clear error and the raw text', async () => {
  if (MODE !== 'mock') throw new Skip('needs the mock server');
  await mock('/__mock/reset', {});
  await mock('/__mock/next', { answer: 'table' });
  const page = await newPage(DESKTOP, { init: { fn: () => localStorage.setItem('qvl.settings.v1', JSON.stringify({ maxTokens: 6 })), arg: null } });
  await addScene(page);
  await page.locator('.extract-toggle:visible').click();
  await page.fill('#extract-cols', 'Item, Price');
  await page.keyboard.press('Enter');
  const answer = await waitAnswerDone(page, 1);
  await answer.locator('.extract-error').waitFor();
  assert((await answer.locator('.extract-error').textContent()).includes('Could not read the table'), 'error title');
  assert((await answer.locator('.extract-error').textContent()).includes('max answer length'), 'says it was cut');
  const raw = await answer.locator('.extract-raw').textContent();
  assert(raw.startsWith('{"rows"'), `raw text shown: ${raw}`);
  eq(await answer.locator('.extract-table').count(), 0, 'no table');
  await page.context().close();
});

test('tool calls in an answer are shown with name and pretty arguments', async () => {
  if (MODE !== 'mock') throw new Skip('needs the mock server');
  await mock('/__mock/reset', {});
  const args = { city: 'Paris <b>', days: 3, units: { temp: 'C' } };
  await mock('/__mock/next', { answer: 'followup', tool_calls: [{ name: 'get_weather', arguments: args }, { name: 'get_time', arguments: {} }] });
  const page = await newPage();
  await page.fill('#prompt', 'What is the weather in Paris?');
  await page.keyboard.press('Enter');
  const answer = await waitAnswerDone(page, 1);
  eq(JSON.stringify(await answer.locator('.tool-call-name').allTextContents()), '["get_weather","get_time"]', 'function names');
  eq(await answer.locator('.tool-call-args').first().textContent(), JSON.stringify(args, null, 2), 'pretty arguments');
  eq(await answer.locator('.tool-call-args b').count(), 0, 'arguments are text');
  await page.reload();
  await page.click('.conv-open');
  eq(await page.locator('.tool-call-name').count(), 2, 'tool calls kept in the history');
  await shot(page, 'desktop-tool-calls');
  await page.context().close();
});

test('a reasoning model: the thinking streams in a collapsible block, closed once the answer starts', async () => {
  if (MODE !== 'mock') throw new Skip('needs the mock server');
  await mock('/__mock/reset', {});
  const reasoning = 'The user asks about the sky. <b>Rayleigh</b> scattering favours short wavelengths, so blue light is scattered most.';
  await mock('/__mock/next', { answer: 'slow', reasoning, delay_ms: 60 });
  const page = await newPage();
  await page.fill('#prompt', 'Why is the sky blue?');
  await page.keyboard.press('Enter');
  const block = page.locator('.msg.assistant .reasoning');
  await block.waitFor({ state: 'visible', timeout: 10000 });
  await page.waitForFunction(() => document.querySelector('.reasoning-text')?.textContent.includes('scattering'), null, { timeout: 10000 });
  eq(await block.evaluate((d) => d.open), true, 'open while the model thinks');
  eq((await page.locator('.reasoning-summary').textContent()).startsWith('Thinking'), true, 'summary says Thinking');
  eq(await page.locator('.msg.assistant .md').textContent(), '', 'no answer text yet');
  await shot(page, 'desktop-reasoning-streaming');
  const answer = await waitAnswerDone(page, 1);
  eq(await block.evaluate((d) => d.open), false, 'closed once the answer is there');
  eq(await page.locator('.reasoning-summary').textContent(), 'Thought', 'summary says Thought');
  eq(await page.locator('.reasoning-text').textContent(), reasoning, 'the whole reasoning, as text');
  eq(await page.locator('.reasoning-text b').count(), 0, 'reasoning never becomes HTML');
  eq((await answer.locator('.md').textContent()).includes('Rayleigh'), false, 'the answer holds no reasoning');
  await page.click('.reasoning-summary');
  eq(await block.evaluate((d) => d.open), true, 'a click opens it');
  await shot(page, 'desktop-reasoning-open');
  const st = await mock('/__mock/state');
  eq(st.requests.length, 1, 'one request');
  await page.reload();
  await page.click('.conv-open');
  await page.locator('.reasoning').first().waitFor({ state: 'attached' });
  eq(await page.locator('.reasoning-text').first().textContent(), reasoning, 'kept in the history');
  await page.context().close();
});

// ---- Video: the frame strip comes from the real server's sampling ------------------------------

const VIDEO_CASE = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/fixtures/preprocess_video/h264_mp4/case.json'), 'utf8'));
const VIDEO_CLIP = fs.readFileSync(path.join(ROOT, 'tests/fixtures/preprocess_video/h264_mp4', VIDEO_CASE.video));
const VIDEO_MAX_MB = 1; // the real server runs with --max-video-mb 1: a larger clip is refused (413)

// The strip's own rule for a time in the clip (lib.js formatSeconds, below 10 s).
const stripTime = (t) => `${t.toFixed(2)} s`;

async function dropFile(page, name, type, buffer) {
  await page.evaluate(
    ({ name, type, b64 }) => {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], name, { type }));
      window.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    },
    { name, type, b64: buffer.toString('base64') },
  );
}

test('ask about a video: the sampled frames with their times, the answer streamed; bad clips are refused', async () => {
  if (MODE !== 'real') throw new Skip('the frame strip is the real server sampling the clip');
  const page = await newPage();
  const chats = [];
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) chats.push(r.postDataJSON());
  });
  await page.setInputFiles('#file-input', { name: 'clip.mp4', mimeType: 'video/mp4', buffer: VIDEO_CLIP });
  const att = page.locator('.att-video');
  await page.waitForSelector('.att-video.att-ready', { timeout: 60000 });
  // Exactly the fixture's sampled frames (indices, times = index / fps) in its temporal groups.
  const fps = VIDEO_CASE.video_fps;
  eq(
    JSON.stringify(await att.locator('.frame').evaluateAll((fs) => fs.map((f) => Number(f.dataset.index)))),
    JSON.stringify(VIDEO_CASE.frame_indices),
    'sampled frame indices',
  );
  eq(
    JSON.stringify(await att.locator('.frame-time').allTextContents()),
    JSON.stringify(VIDEO_CASE.frame_indices.map((i) => stripTime(i / fps))),
    'frame times',
  );
  eq(JSON.stringify(await att.locator('.group-time').allTextContents()), JSON.stringify(VIDEO_CASE.timestamp_text), 'group timestamps as in the prompt');
  const meta = await att.locator('.att-meta').textContent();
  assert(meta.includes(`${VIDEO_CASE.frame_indices.length} of ${VIDEO_CASE.total_num_frames} frames`), `facts line: ${meta}`);
  // The thumbnails are the decoded frames: the clip's size (it fits the 160×90 box), not blank,
  // and not all the same picture.
  const thumbs = await att.locator('.frame-thumb').evaluateAll((imgs) =>
    imgs.map((img) => {
      const c = document.createElement('canvas');
      c.width = img.naturalWidth;
      c.height = img.naturalHeight;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      const d = g.getImageData(0, 0, c.width, c.height).data;
      let sum = 0;
      let sq = 0;
      for (let i = 0; i < d.length; i += 4) {
        sum += d[i] + d[i + 1] + d[i + 2];
        sq += (d[i] + d[i + 1] + d[i + 2]) ** 2;
      }
      const n = d.length / 4;
      return { w: img.naturalWidth, h: img.naturalHeight, mean: sum / n, sd: Math.sqrt(Math.max(0, sq / n - (sum / n) ** 2)) };
    }),
  );
  const [cw, ch] = VIDEO_CASE.container ? [VIDEO_CASE.container.width, VIDEO_CASE.container.height] : [0, 0];
  for (const t of thumbs) {
    eq(`${t.w}x${t.h}`, `${cw}x${ch}`, 'thumbnail size');
    assert(t.sd > 1, `a thumbnail is flat (mean ${t.mean}, sd ${t.sd})`);
  }
  assert(new Set(thumbs.map((t) => t.mean.toFixed(3))).size > 1, 'every thumbnail looks the same');
  await shot(page, 'desktop-video-strip');
  await page.setViewportSize(PHONE);
  assert(await page.locator('.frame-strip').isVisible(), 'strip visible at phone width');
  await shot(page, 'phone-video-strip');
  await page.setViewportSize(DESKTOP);

  await page.fill('#prompt', 'What happens in this video?');
  await page.keyboard.press('Enter');
  const answer = await waitAnswerDone(page, 1);
  assert((await answer.locator('.md').textContent()).trim().length > 0, 'answer is empty');
  assert((await answer.locator('.error-card').count()) === 0, `error: ${await answer.locator('.error-card').allTextContents()}`);
  eq(chats.length, 1, 'one chat request');
  const content = chats[0].messages[0].content;
  eq(content[0].type, 'video_url', 'the clip is a video_url part');
  eq(content[0].video_url.url, `data:video/mp4;base64,${VIDEO_CLIP.toString('base64')}`, 'the clip as chosen');
  eq(content[1].text, 'What happens in this video?', 'question');
  eq(await page.locator('.msg.user .msg-video .frame').count(), VIDEO_CASE.frame_indices.length, 'the strip stays with the question');
  await shot(page, 'desktop-video-answer');
  await page.reload();
  await page.click('.conv-open');
  await page.locator('.msg.user .msg-video .frame').first().waitFor();
  eq(await page.locator('.msg.user .group-time').allTextContents().then((t) => JSON.stringify(t)), JSON.stringify(VIDEO_CASE.timestamp_text), 'strip kept across a reload');

  // A file that is no video (dropped), and one above the server's --max-video-mb (picked): each
  // shows the server's reason on its card and cannot be sent.
  await page.click('#new-chat');
  await dropFile(page, 'broken.mp4', 'video/mp4', Buffer.from('this is not a video at all, just some text '.repeat(40)));
  const broken = page.locator('.att-video.att-error');
  await broken.waitFor({ timeout: 30000 });
  const why = await broken.locator('[role="alert"]').textContent();
  assert(/could not use this request/i.test(why) && /video|format|container/i.test(why), `broken clip: ${why}`);
  await page.fill('#prompt', 'And this one?');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => /cannot be sent/.test(document.getElementById('toast').textContent));
  eq(await page.locator('.msg').count(), 0, 'nothing was sent');
  await page.click('button[aria-label="Remove broken.mp4"]');
  const big = Buffer.alloc(VIDEO_MAX_MB * 1024 * 1024 + 200 * 1024, 7);
  await page.setInputFiles('#file-input', { name: 'big.mp4', mimeType: 'video/mp4', buffer: big });
  const tooBig = page.locator('.att-video.att-error');
  await tooBig.waitFor({ timeout: 30000 });
  const t413 = await tooBig.locator('[role="alert"]').textContent();
  assert(t413.includes('Video too large') && t413.includes(`up to ${VIDEO_MAX_MB} MiB`) && t413.includes('--max-video-mb'), `413 text: ${t413}`);
  await shot(page, 'desktop-video-errors');
  await page.context().close();
});

async function main() {
  let passed = 0;
  let failed = 0;
  try {
    server = await startServer();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      // playwright-core gives every launch a fresh temporary --user-data-dir of its own (and refuses
      // one in args), so no profile state leaks between runs; each test also gets a new context.
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    sceneBuf = await makeScene();
    fs.writeFileSync(path.join(ART, 'scene.png'), sceneBuf);
    console.log(`browser tests against the ${MODE} server at ${server.base} (Chromium ${browser.version()})`);
    for (const t of tests) {
      if (ONLY && !ONLY.test(t.name)) continue;
      const t0 = Date.now();
      let timer;
      try {
        openedPages = [];
        await Promise.race([t.fn(), new Promise((_, rej) => (timer = setTimeout(() => rej(new Error(`timed out after ${TEST_TIMEOUT_MS} ms`)), TEST_TIMEOUT_MS)))]);
        const errs = openedPages.flatMap((p) => p.errors.filter((e) => !(p.allowErrors ?? []).some((re) => re.test(e))));
        if (errs.length) throw new Error(`errors in the page console (script errors, CSP violations): ${errs.join(' | ')}`);
        passed++;
        console.log(`  ok    ${t.name} (${Date.now() - t0} ms)`);
      } catch (e) {
        if (e instanceof Skip) console.log(`  skip  ${t.name}: ${e.message}`);
        else {
          failed++;
          console.log(`  FAIL  ${t.name}: ${e.stack || e}`);
          for (const p of openedPages) if (p.errors.length) console.log(`        page console: ${p.errors.join(' | ')}`);
          for (const ctx of browser.contexts()) for (const p of ctx.pages()) await p.screenshot({ path: path.join(ART, `FAIL-${t.name.replace(/\W+/g, '_').slice(0, 60)}.png`) }).catch(() => {});
        }
      } finally {
        clearTimeout(timer);
        for (const ctx of browser.contexts()) await ctx.close().catch(() => {});
      }
    }
  } catch (e) {
    failed++;
    console.log(`  FAIL  setup: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close().catch(() => {});
    if (server) server.proc.kill('SIGTERM');
  }
  console.log(`screenshots in ${path.relative(ROOT, ART)}/`);
  console.log(`browser: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main();
