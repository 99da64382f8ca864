// qvl serve under hostile and heavy load (issue 10, docs/RELIABILITY.md): image bombs, huge prompts,
// slowloris, connection floods, SIGTERM at awkward moments, allow-list bypasses, invalid UTF-8 in
// error bodies, an idle burst. Every server listens on loopback; every test is bounded in time.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { connect } from "node:net";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { deflateSync } from "node:zlib";
import { check, client, dataUrl, errorOf, metrics, postJson, root, running, runSuite, sleep, startServer, test, waitMetric, withTimeout, MODEL_ID } from "./lib.mjs";

// ---- helpers -----------------------------------------------------------------------------------

const CRC = new Int32Array(256).map((_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c; });
function crc32(buf) { let c = -1; for (const b of buf) c = CRC[(c ^ b) & 255] ^ (c >>> 8); return (c ^ -1) >>> 0; }
function chunk(type, data) {
  const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type), data]);
  const crc = Buffer.alloc(4); crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
// An all-zero 8-bit grey PNG of w x h: tiny on the wire, w*h pixels once decoded.
function zeroPng(w, h) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 0;
  const raw = Buffer.alloc((w + 1) * h); // filter byte 0 + zero pixels on every row
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw, { level: 9 })), chunk("IEND", Buffer.alloc(0))]);
}
const pngUrl = (buf) => "data:image/png;base64," + buf.toString("base64");
const imagesMsg = (urls, text = "What is this?") => ({ role: "user", content: [...urls.map((url) => ({ type: "image_url", image_url: { url } })), { type: "text", text }] });

function vmHwmKb(pid) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmHWM:\s+(\d+) kB/);
  return m ? Number(m[1]) : NaN;
}

// A raw socket: sends `data` (string or Buffer, or nothing), collects what comes back.
function rawSocket(port, { data, localAddress } = {}) {
  const sock = connect({ port, host: "127.0.0.1", localAddress });
  const st = { sock, got: Buffer.alloc(0), closed: false, error: null };
  st.opened = new Promise((r) => sock.on("connect", r));
  sock.on("data", (d) => { st.got = Buffer.concat([st.got, d]); });
  sock.on("error", (e) => { st.error = e.code || String(e); });
  st.done = new Promise((r) => sock.on("close", () => { st.closed = true; r(); }));
  if (data) sock.write(data);
  st.status = () => { const m = st.got.toString("latin1").match(/^HTTP\/1\.[01] (\d{3})/); return m ? Number(m[1]) : 0; };
  return st;
}

// An HTTP server for image URLs: /img/ok.png, /secret.png, /slow/ok.png (answers after `delay` ms).
function imageHost(delay = 0) {
  const png = readFileSync(join(root, "tests/fixtures/images/rgb_64x64.png"));
  const h = { seen: [], closedEarly: 0 };
  h.server = createServer((req, res) => {
    h.seen.push(req.url);
    const send = () => { res.writeHead(200, { "Content-Type": "image/png" }); res.end(png); };
    if (req.url.startsWith("/slow/")) {
      const t = setTimeout(send, delay);
      res.on("close", () => { if (!res.writableEnded) { h.closedEarly++; clearTimeout(t); } });
    } else if (req.url === "/img/ok.png" || req.url === "/secret.png") send();
    else { res.writeHead(404); res.end(); }
  });
  h.listen = () => new Promise((r) => h.server.listen(0, "127.0.0.1", () => { h.port = h.server.address().port; r(h); }));
  h.close = () => new Promise((r) => { h.server.closeAllConnections?.(); h.server.close(r); });
  return h;
}

// In-process POST (no curl process to spawn: the timings are the server's, not the machine's load)
async function post(s, path, obj) {
  const r = await fetch(s.base + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: typeof obj === "string" ? obj : JSON.stringify(obj) });
  return { status: r.status, headers: r.headers, body: await r.text() };
}
const chat = (text, extra = {}) => ({ messages: [{ role: "user", content: text }], max_tokens: 4, temperature: 0, ...extra });
async function timed(p) { const t0 = Date.now(); const r = await p; return { r, ms: Date.now() - t0 }; }

// ---- image bombs and huge prompts --------------------------------------------------------------

let A, host;

test("image bomb: 8 requests x 8 all-zero 7000x7000 PNGs, all 4xx within 2 s, RSS within the budget", async () => {
  const bomb = pngUrl(zeroPng(7000, 7000));
  check(bomb.length < 200000, "the bomb is small on the wire", bomb.length);
  const before = vmHwmKb(A.proc.pid);
  const body = { messages: [imagesMsg(Array(8).fill(bomb))], max_tokens: 4 };
  const text = JSON.stringify(body);
  const res = await Promise.all(Array.from({ length: 8 }, () => timed(post(A, "/v1/chat/completions", text))));
  for (const { r, ms } of res) check(r.status >= 400 && r.status < 500 && ms < 2000, "bomb answered 4xx within 2 s", { status: r.status, ms, body: r.body.slice(0, 200) });
  check(/pixel/i.test(errorOf(res[0].r)?.message || ""), "the error names the pixel limit", res[0].r.body.slice(0, 300));
  const after = vmHwmKb(A.proc.pid);
  // --image-memory-mb 256: decoding may never add more than that (before the fix: ~2 GB here)
  check(after - before < 256 * 1024, "peak RSS grew by less than the 256 MiB image budget", { beforeKb: before, afterKb: after });
  const ok = await postJson(A, "/v1/chat/completions", { messages: [imagesMsg([dataUrl("rgb_64x64.png")])], max_tokens: 2 });
  check(ok.status === 200, "a normal image request still works", ok.status);
  const m = await metrics(A);
  check(m.qvl_image_budget_pixels === Math.floor((256 << 20) / 12) && m.qvl_image_budget_peak_pixels > 0 &&
    m.qvl_image_budget_peak_pixels <= m.qvl_image_budget_pixels && m.qvl_image_budget_reserved_pixels === 0, "image budget metrics", m);
}, 30000);

test("per-request pixel budget and server-wide pool: refused from the headers", async () => {
  // 8 x 9 Mpixel = 72 Mpixel > --max-request-pixels 48M (each image alone is allowed)
  const mid = pngUrl(zeroPng(3000, 3000));
  let { r, ms } = await timed(post(A, "/v1/chat/completions", { messages: [imagesMsg(Array(8).fill(mid))], max_tokens: 4 }));
  check(r.status === 413 && /max_request_pixels/.test(errorOf(r)?.message || "") && ms < 2000, "request over max_request_pixels -> 413 fast", { status: r.status, ms, body: r.body.slice(0, 300) });
  // 3 x 9 Mpixel = 27 Mpixel > the pool of 256 MiB / 12 B = 22 Mpixel
  ({ r, ms } = await timed(post(A, "/v1/chat/completions", { messages: [imagesMsg(Array(3).fill(mid))], max_tokens: 4 })));
  check(r.status === 413 && /image_memory_mb/.test(errorOf(r)?.message || "") && ms < 2000, "request over the whole pool -> 413 fast", { status: r.status, ms, body: r.body.slice(0, 300) });
}, 30000);

test("a 40 MB prompt is refused as over the context without tokenizing it all", async () => {
  const big = JSON.stringify(chat("lorem ipsum dolor sit amet ".repeat(1_500_000)));
  check(big.length > 40e6, "body over 40 MB", big.length);
  const { r, ms } = await timed(postJson(A, "/v1/chat/completions", big));
  check(r.status === 400 && /exceeds the context/.test(errorOf(r)?.message || ""), "context overflow", { status: r.status, body: r.body.slice(0, 300) });
  check(ms < 15000, "answered within 15 s, body upload and JSON parse included (before: ~52 s of CPU)", ms);
}, 60000);

test("idle burst: 8 requests on 8 free batch slots with --queue 0 are all served", async () => {
  const Q = await startServer(["--queue", "0", "--max-batch-size", "8", "--max-tokens", "64"]);
  try {
    const rs = await Promise.all(Array.from({ length: 8 }, (_, i) => postJson(Q, "/v1/chat/completions", chat(`burst ${i}`))));
    const codes = rs.map((r) => r.status);
    check(codes.every((c) => c === 200), "no 503 while slots are free", codes);
  } finally {
    await Q.stop();
  }
}, 30000);

test("error bodies are valid UTF-8 whatever bytes the request had", async () => {
  const dec = new TextDecoder("utf-8", { fatal: true });
  const valid = (b) => { try { dec.decode(b); return true; } catch { return false; } };
  const bodyOf = (st) => { const s = st.got; const i = s.indexOf("\r\n\r\n"); return i >= 0 ? s.subarray(i + 4) : Buffer.alloc(0); };
  const payload = Buffer.concat([Buffer.from('{"model":"'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('","messages":[{"role":"user","content":"x"}]}')]);
  const reqs = [
    Buffer.concat([Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\nConnection: close\r\n\r\n`), payload]),
    Buffer.concat([Buffer.from("GET /v1/models/"), Buffer.from([0xc0, 0xaf, 0xed, 0xa0, 0x80]), Buffer.from(" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")]),
    Buffer.concat([Buffer.from("GET /v1/nothing"), Buffer.from([0x80, 0xff]), Buffer.from(" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")]),
  ];
  for (const q of reqs) {
    const st = rawSocket(A.port, { data: q });
    await withTimeout(st.done, 5000, "raw request");
    const b = bodyOf(st);
    check(st.status() >= 400 && b.length > 0 && valid(b), "error body is valid UTF-8", { status: st.status(), body: b.toString("latin1").slice(0, 200) });
    try { JSON.parse(b.toString("utf8")); check(true, "error body is JSON"); } catch { check(false, "error body is JSON", b.toString("latin1").slice(0, 200)); }
  }
}, 20000);

test("allow-list bypass: dot segments and escapes are normalised before the check", async () => {
  const p = host.port;
  const ask = (url) => ({ messages: [imagesMsg([url])], max_tokens: 2 });
  for (const url of [`http://127.0.0.1:${p}/img/../secret.png`, `http://127.0.0.1:${p}/img/%2e%2e/secret.png`, `http://127.0.0.1:${p}/img/.%2E/secret.png`,
    `http://user@127.0.0.1:${p}/img/ok.png`]) {
    const r = await postJson(A, "/v1/chat/completions", ask(url));
    check(r.status === 400 && /not allowed/.test(errorOf(r)?.message || ""), `refused: ${url}`, { status: r.status, body: r.body.slice(0, 200) });
  }
  check(!host.seen.includes("/secret.png"), "the secret was never fetched", host.seen);
  const r = await postJson(A, "/v1/chat/completions", ask(`HTTP://127.0.0.1:${p}/img/./x/../ok.png#frag`));
  check(r.status === 200 && host.seen.at(-1) === "/img/ok.png", "an allowed URL is fetched in its normal form", { status: r.status, seen: host.seen, body: r.body.slice(0, 200) });
}, 20000);

// ---- connections -------------------------------------------------------------------------------

test("per-client cap: 429 for the client at its cap, others served; the body deadline", async () => {
  const B = await startServer(["--max-connections", "16", "--max-connections-per-client", "4", "--header-timeout-s", "3", "--body-timeout-s", "3"]);
  try {
    // 4 connections from 127.0.0.2 busy sending a body (not evictable)
    const held = [];
    for (let i = 0; i < 4; i++) {
      const st = rawSocket(B.port, { localAddress: "127.0.0.2", data: "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{" });
      await st.opened;
      held.push(st);
    }
    await sleep(200);
    const fifth = rawSocket(B.port, { localAddress: "127.0.0.2", data: "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" });
    await withTimeout(fifth.done, 5000, "fifth connection");
    check(fifth.status() === 429 && /Retry-After/i.test(fifth.got.toString()), "5th connection of the client -> 429 + Retry-After", fifth.got.toString().slice(0, 200));
    const other = rawSocket(B.port, { localAddress: "127.0.0.3", data: "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" });
    await withTimeout(other.done, 5000, "other client");
    check(other.status() === 200, "another client is served", other.got.toString().slice(0, 200));
    // the body deadline is not stretched by trickling: the held ones, sending a byte every 300 ms, get 408
    const drip = setInterval(() => { for (const st of held) if (!st.closed) st.sock.write(" "); }, 300);
    try {
      await withTimeout(Promise.all(held.map((st) => st.done)), 8000, "body deadline");
    } catch {}
    clearInterval(drip);
    check(held.every((st) => st.closed && st.status() === 408), "trickled bodies end with 408 at --body-timeout-s", held.map((st) => st.status()));
    for (const st of held) st.sock.destroy();
  } finally {
    await B.stop();
  }
}, 30000);

test("slowloris: 100 slow sockets; a real client and /health are still answered; slow ones cut at the header deadline", async () => {
  const B = await startServer(["--max-connections", "16", "--header-timeout-s", "3"]);
  try {
    const slow = [];
    for (let i = 0; i < 100; i++) slow.push(rawSocket(B.port, { data: "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" }));
    await Promise.all(slow.map((s) => Promise.race([s.opened, s.done])));
    // one header line every 300 ms (an idle timer that restarts on each byte would never fire)
    const drip = setInterval(() => { for (const s of slow) if (!s.closed) s.sock.write(`X-Slow-${Date.now() % 1000}: 1\r\n`); }, 300);
    try {
      await sleep(1300);
      const { r: h, ms: hms } = await timed(fetch(B.base + "/health"));
      check(h.status === 200, "/health answers while slow sockets hold the pool", { status: h.status, hms });
      const { r, ms } = await timed(postJson(B, "/v1/chat/completions", chat("real client")));
      check(r.status === 200 && ms < 5000, "a real client gets its answer", { status: r.status, ms });
      await sleep(3500); // past the header deadline of every admitted slow socket
      const open = slow.filter((s) => !s.closed).length;
      check(open === 0, "every slow socket was closed by the header deadline", open);
      const codes = new Set(slow.map((s) => s.status()));
      check([...codes].every((c) => [0, 408, 429, 503].includes(c)) && (codes.has(408) || codes.has(503)), "slow sockets got 408 / 503 answers", [...codes]);
    } finally {
      clearInterval(drip);
      for (const s of slow) s.sock.destroy();
    }
  } finally {
    await B.stop();
  }
}, 30000);

test("flood beyond --max-connections: every socket gets an HTTP status; the reserve answers /health", async () => {
  const C = await startServer(["--max-connections", "8", "--max-connections-per-client", "0", "--max-tokens", "200"]);
  try {
    // fill the pool with 8 connections busy sending a body
    const held = [];
    for (let i = 0; i < 8; i++) {
      const st = rawSocket(C.port, { data: "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{" });
      await st.opened;
      held.push(st);
    }
    await sleep(200);
    const h = rawSocket(C.port, { data: "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" });
    await withTimeout(h.done, 5000, "health on the reserve");
    check(h.status() === 200 && /Connection: close/i.test(h.got.toString()), "/health answered from the reserve (then closed)", h.got.toString().slice(0, 300));
    const body = JSON.stringify(chat("flood", { stream: true, max_tokens: 50 }));
    const c = rawSocket(C.port, { data: `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` });
    await withTimeout(c.done, 5000, "chat on the reserve");
    check(c.status() === 503, "a chat on a reserve connection -> 503", c.got.toString().slice(0, 200));
    for (const st of held) st.sock.destroy();
    await sleep(300);
    // the flood: 200 streams at once
    const flood = Array.from({ length: 200 }, () => rawSocket(C.port, { data: `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}` }));
    await withTimeout(Promise.all(flood.map((s) => s.done)), 30000, "flood answered");
    const codes = {};
    for (const s of flood) codes[s.status()] = (codes[s.status()] || 0) + 1;
    check(!codes[0], "every flood socket got an HTTP status line (no bare close)", codes);
    check(codes[200] > 0 && codes[503] > 0, "some served, the rest 503", codes);
    const r503 = flood.find((s) => s.status() === 503);
    check(r503 && /Retry-After: \d+/i.test(r503.got.toString()), "503 carries Retry-After", r503?.got.toString().slice(0, 300));
    const r = await postJson(C, "/v1/chat/completions", chat("after the flood"));
    check(r.status === 200, "served after the flood", r.status);
    const m = await metrics(C);
    // the other 503s come from reserve connections (reused as they free up), which are not rejections
    const rej = m['qvl_connections_rejected_total{reason="max_connections"}'];
    check(rej > codes[503] / 2 && rej <= codes[503], "rejections counted in /metrics",
      { metric: m['qvl_connections_rejected_total{reason="max_connections"}'], codes });
  } finally {
    await C.stop();
  }
}, 60000);

// ---- slow readers (issue 24) ----------------------------------------------------------------------

// argv: port, JSON [[path, body]...]; sends each request on its own socket with a 4 KB receive buffer,
// prints "sent", then never reads until stdin closes.
const SLOW_CLIENTS = `
import socket, sys, json
socks = []
for path, body in json.loads(sys.argv[2]):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", int(sys.argv[1])))
    b = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n" % (path.encode(), len(b)) + b)
    socks.append(s)
print("sent", flush=True)
sys.stdin.read()
`;

test("slow readers: streams that never read are cancelled after --write-timeout-s, their slots freed; a bystander is served", async () => {
  const S = await startServer(["--write-timeout-s", "2", "--max-tokens", "6000", "--ctx", "8192", "--max-batch-size", "8",
    "--queue", "16", "--max-connections-per-client", "0"]);
  try {
    const req = (path, body) => {
      const b = JSON.stringify(body);
      return `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
    };
    const story = [{ role: "user", content: "Tell me a long story." }];
    const kinds = [
      ["/api/chat", { model: MODEL_ID, messages: story, options: { num_predict: 6000, temperature: 0 } }], // NDJSON
      ["/v1/chat/completions", { model: MODEL_ID, messages: story, max_tokens: 6000, temperature: 0, stream: true }],
      ["/v1/responses", { model: MODEL_ID, input: "Tell me a long story.", max_output_tokens: 6000, temperature: 0, stream: true }],
      ["/v1/completions", { model: MODEL_ID, prompt: "Once upon a time", max_tokens: 6000, temperature: 0, stream: true }],
    ];
    // 20 clients that send a stream request and never read: 12 Ollama streams (the attack), 8 spread over
    // the other streaming endpoints. Python's sockets take SO_RCVBUF before connect (node's cannot), so
    // the window is small and the server's writes stall after a few KB, as behind a stalled client.
    const reqs = Array.from({ length: 20 }, (_, i) => (i < 12 ? kinds[0] : kinds[i % 4]));
    const py = spawn("python3", ["-c", SLOW_CLIENTS, String(S.port), JSON.stringify(reqs)], { stdio: ["pipe", "pipe", "inherit"] });
    await withTimeout(new Promise((r) => py.stdout.once("data", r)), 10000, "slow clients connected");
    await sleep(500);
    const t0 = Date.now();
    const r = await withTimeout(postJson(S, "/v1/chat/completions", chat("bystander", { max_tokens: 8 })), 100000, "bystander");
    const ms = Date.now() - t0;
    check(r.status === 200, "the bystander is answered", r.status);
    // 20 streams in 8 slots, the bystander queued behind 12 of them: each wave stalls after a few KB of
    // output and is cancelled 2 s later (before: every stream held its slot for its 6000 tokens)
    check(ms < 60000, "the bystander is served in bounded time (not after the stalled streams' 6000 tokens)", { ms });
    const m = await waitMetric(S, "qvl_slow_reader_cancels_total", (v) => v >= 8, 20000);
    check(m >= 8, "the cancellations show in /metrics (qvl_slow_reader_cancels_total)", m);
    const h = await fetch(S.base + "/health");
    check(h.status === 200, "healthy afterwards", h.status);
    py.stdin.end();
  } finally {
    await S.stop();
  }
}, 150000);

// ---- time limits and SIGTERM ----------------------------------------------------------------------

test("--timeout-s covers pre-processing; a client that leaves stops its image download", async () => {
  const slowHost = await imageHost(4000).listen();
  const F = await startServer(["--timeout-s", "1", "--allow-image-url", `http://127.0.0.1:${slowHost.port}/slow/`]);
  try {
    const ask = { messages: [imagesMsg([`http://127.0.0.1:${slowHost.port}/slow/ok.png`])], max_tokens: 2 };
    const { r, ms } = await timed(postJson(F, "/v1/chat/completions", ask));
    check(r.status === 504 && ms < 2500, "slow image fetch ends at the request deadline (504)", { status: r.status, ms, body: r.body.slice(0, 200) });
    await sleep(200);
    check(slowHost.closedEarly === 1, "the download was abandoned", slowHost.closedEarly);
  } finally {
    await F.stop();
    await slowHost.close();
  }
}, 30000);

test("SIGTERM during pre-processing: /health 503 draining at once, new work 503, the accepted request answered, exit 0", async () => {
  const slowHost = await imageHost(1500).listen();
  const D = await startServer(["--allow-image-url", `http://127.0.0.1:${slowHost.port}/slow/`, "--drain-timeout-s", "10"]);
  try {
    const ask = { messages: [imagesMsg([`http://127.0.0.1:${slowHost.port}/slow/ok.png`])], max_tokens: 4, temperature: 0 };
    const inflight = postJson(D, "/v1/chat/completions", ask);
    const t0 = Date.now();
    while (!slowHost.seen.length && Date.now() - t0 < 5000) await sleep(10);
    check(slowHost.seen.length === 1, "the request is fetching its image");
    D.proc.kill("SIGTERM");
    await sleep(150);
    const { r: h, ms: hms } = await timed(fetch(D.base + "/health"));
    const hb = await h.json();
    check(h.status === 503 && hb.status === "draining" && hms < 1000, "/health 503 draining at once", { status: h.status, hb, hms });
    const n = await postJson(D, "/v1/chat/completions", chat("new after SIGTERM"));
    check(n.status === 503 && errorOf(n)?.code === "shutting_down", "new chat -> 503 shutting_down", { status: n.status, body: n.body.slice(0, 200) });
    const r = await inflight;
    let body = null;
    try { body = JSON.parse(r.body); } catch {}
    check(r.status === 200 && body?.choices?.[0]?.message, "the accepted request got its complete response", { status: r.status, body: r.body.slice(0, 200) });
    const ex = await withTimeout(D.exit, 10000, "exit after SIGTERM");
    check(ex.code === 0, "exit 0", ex);
  } finally {
    await D.stop();
    await slowHost.close();
  }
}, 30000);

test("SIGTERM during streaming: the stream ends completely (cancelled at the drain timeout), new work 503, exit 0", async () => {
  const E = await startServer(["--drain-timeout-s", "2", "--max-tokens", "6000", "--ctx", "8192"]);
  try {
    const stream = await client(E).chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "Tell me a long story." }], max_tokens: 6000, temperature: 0, stream: true });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    const t0 = Date.now();
    E.proc.kill("SIGTERM");
    await sleep(100);
    const h = await fetch(E.base + "/health");
    check(h.status === 503, "/health 503 while draining", h.status);
    const n = await postJson(E, "/v1/chat/completions", chat("new during drain"));
    check(n.status === 503, "new chat during drain -> 503", n.status);
    let chunks = 0, err = null;
    try {
      for (;;) { const { done } = await it.next(); if (done) break; chunks++; }
    } catch (e) { err = e; }
    // the stream either finished or was cancelled at the drain timeout with an error event: both complete
    check(err === null || /shutting down/.test(String(err?.message || err)), "the stream ended with [DONE] or a shutdown error event", String(err));
    const ex = await withTimeout(E.exit, 10000, "exit after SIGTERM");
    check(ex.code === 0 && Date.now() - t0 < 2000 + 6000, "exit 0 within the drain timeout (+ grace)", { ex, ms: Date.now() - t0, chunks });
  } finally {
    await E.stop();
  }
}, 30000);

runSuite("e2e-hostile", {
  setup: async () => {
    host = await imageHost().listen();
    A = await startServer(["--image-memory-mb", "256", "--max-tokens", "64",
      "--allow-image-url", `http://127.0.0.1:${host.port}/img/`]);
    return { A };
  },
  teardown: async () => {
    const ex = await A.stop();
    check(ex.code === 0, "server A exits 0", ex);
    await host.close();
  },
  alive: () => running(A, "server A"),
});
