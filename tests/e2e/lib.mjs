// Shared helpers of the end-to-end suites (tests/e2e/*.mjs): start and stop a real `qvl serve` on a
// free loopback port, clients (openai, curl), metrics, checks and a suite runner. Each suite is a
// file that registers tests with test() and calls runSuite(); run.sh runs every suite and adds up
// their "NAME: N passed, N failed" lines.
import { execFile, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";

export const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, "../..");
export const QVL = resolve(root, process.env.QVL_BIN || "qvl");
export const MODEL = join(root, "tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf");
export const MMPROJ = join(root, "tests/fixtures/models/e2e/gguf/mmproj-e2e-F16.gguf");
export const MODEL_ID = "e2e-Q8_0.gguf";
export const ONLY = process.env.QVL_E2E_ONLY ? new RegExp(process.env.QVL_E2E_ONLY) : null;

let passed = 0, failed = 0;
export const counts = () => ({ passed, failed });
export function check(cond, what, detail) {
  if (cond) passed++;
  else {
    failed++;
    console.error(`FAIL ${what}${detail !== undefined ? ": " + (typeof detail === "string" ? detail : JSON.stringify(detail)).slice(0, 400) : ""}`);
  }
  return cond;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export function withTimeout(p, ms, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => (t = setTimeout(() => rej(new Error(`${what}: timed out after ${ms} ms`)), ms)))]).finally(() => clearTimeout(t));
}

export function dataUrl(name) {
  const ext = name.endsWith(".jpg") ? "jpeg" : "png";
  return `data:image/${ext};base64,` + readFileSync(join(root, "tests/fixtures/images", name)).toString("base64");
}

// A loopback HTTP server of the fixture images for image URLs (allow-list its base with
// --allow-image-url): /NAME is tests/fixtures/images/NAME, /redirect.png a 302 to /rgb_64x64.png,
// anything else a 404. Resolves to { base: "http://127.0.0.1:PORT", port, close() }.
export async function fixtureImageHost() {
  const server = createServer((req, res) => {
    if (req.url === "/redirect.png") { res.writeHead(302, { Location: "/rgb_64x64.png" }); return res.end(); }
    try {
      const data = readFileSync(join(root, "tests/fixtures/images", req.url.slice(1).replace(/[^a-z0-9_.]/gi, "")));
      res.writeHead(200, { "Content-Type": "image/png" });
      res.end(data);
    } catch { res.writeHead(404); res.end("no"); }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const port = server.address().port;
  return { base: `http://127.0.0.1:${port}`, port, close: () => server.close() };
}

// ---- servers ---------------------------------------------------------------------------------

// opts.model / opts.mmproj: another model (mmproj null: text only).
export async function startServer(extra = [], env = {}, opts = {}) {
  const mmproj = opts.mmproj === undefined ? MMPROJ : opts.mmproj;
  const args = ["serve", "-m", opts.model || MODEL, ...(mmproj ? ["--mmproj", mmproj] : []), "--port", "0", "--threads", "2", ...extra];
  const proc = spawn(QVL, args, { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  let exited = null;
  const exit = new Promise((r) => proc.on("exit", (code, sig) => { exited = { code, sig }; r(exited); }));
  const port = await withTimeout(new Promise((res, rej) => {
    proc.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) res(Number(m[1]));
    });
    proc.on("exit", () => rej(new Error("qvl serve exited early:\n" + log)));
  }), 20000, "listen");
  const base = `http://127.0.0.1:${port}`;
  const s = {
    proc, port, base, exit,
    log: () => log,
    exited: () => exited,
    async stop() {
      if (exited) return exited;
      proc.kill("SIGTERM");
      try { return await withTimeout(exit, 20000, "stop"); } catch { proc.kill("SIGKILL"); return await exit; }
    },
  };
  // /health is 503 while loading, then 200
  const t0 = Date.now();
  for (;;) {
    try {
      const r = await fetch(base + "/health");
      if (r.status === 200) break;
      if (r.status !== 503) throw new Error(`/health ${r.status}`);
    } catch (e) { if (exited) throw new Error("server died:\n" + log); }
    if (Date.now() - t0 > 30000) throw new Error("server not ready:\n" + log);
    await sleep(20);
  }
  return s;
}

export function client(s, apiKey = "none") {
  return new OpenAI({ baseURL: s.base + "/v1", apiKey, maxRetries: 0, timeout: 120000 });
}

// curl -> {status, headers, body}; stdin (when given) is the request body
export function curl(args, stdin) {
  return new Promise((res) => {
    const p = execFile("curl", ["-s", "-S", "-D", "-", "--max-time", "60", "-H", "Expect:", ...args], { maxBuffer: 64 << 20 }, (err, stdout) => {
      const i = stdout.indexOf("\r\n\r\n");
      const head = i >= 0 ? stdout.slice(0, i) : stdout;
      const m = [...head.matchAll(/^HTTP\/[\d.]+ (\d+)/gm)];
      res({ status: m.length ? Number(m[m.length - 1][1]) : 0, headers: head, body: i >= 0 ? stdout.slice(i + 4) : "" });
    });
    p.stdin.end(stdin ?? "");
  });
}

export function postJson(s, path, obj, extra = []) {
  const body = typeof obj === "string" ? obj : JSON.stringify(obj);
  return curl(["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@-", ...extra, s.base + path], body);
}

export function errorOf(r) {
  try { return JSON.parse(r.body).error; } catch { return null; }
}

export async function metrics(s) {
  const text = await (await fetch(s.base + "/metrics")).text();
  const m = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

export async function waitMetric(s, name, pred, ms) {
  const t0 = Date.now();
  let v;
  while (Date.now() - t0 < ms) {
    v = (await metrics(s))[name];
    if (pred(v)) return v;
    await sleep(20);
  }
  return v;
}

export const userMsg = (text, image) => ({
  role: "user",
  content: image ? [{ type: "image_url", image_url: { url: dataUrl(image) } }, { type: "text", text }] : text,
});

// ---- runner ------------------------------------------------------------------------------------

const tests = [];
export const test = (name, fn, ms = 60000) => tests.push({ name, fn, ms });

// For a suite's alive(): true while the shared server s runs, else what died with the end of its log.
export const running = (s, label = "server") => !s.exited() || `${label} died (${JSON.stringify(s.exited())}):\n` + s.log().slice(-2000);

// Runs the registered tests (QVL_E2E_ONLY='regex' selects by name). `setup` starts the suite's
// shared servers and returns them; `teardown(servers)` stops them and may check their exit.
// `alive(servers)` is asked after each test: true, or what died (a string); the suite then stops
// and that is a failure, also after the last test (stopping quietly would pass with fewer checks).
// Prints "NAME: N passed, N failed" last and exits non-zero on any failure.
export async function runSuite(name, { setup = async () => ({}), teardown = async () => {}, alive = () => true } = {}) {
  const selected = tests.filter((t) => !ONLY || ONLY.test(t.name));
  let ctx;
  try {
    ctx = await setup();
  } catch (e) {
    console.error(`${name}: could not start qvl serve: ` + e.message);
    console.log(`${name}: 0 passed, 1 failed`);
    process.exit(1);
  }
  for (const [i, t] of selected.entries()) {
    const t0 = Date.now();
    const before = failed, checksBefore = passed + failed;
    try {
      await withTimeout(t.fn(), t.ms, t.name);
    } catch (e) {
      check(false, `${t.name}: threw`, e.stack || String(e));
    }
    // the check count per test makes a timing-dependent number of assertions visible across runs
    console.error(`${failed === before ? "ok  " : "FAIL"} ${t.name} (${passed + failed - checksBefore} checks, ${Date.now() - t0} ms)`);
    const state = alive(ctx);
    if (state !== true) {
      check(false, `${name}: stopped after "${t.name}", ${selected.length - i - 1} test(s) not run`, state || "a server died");
      break;
    }
  }
  await teardown(ctx);
  console.log(`${name}: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

// runSuite around one shared server started with args: started(server) hands it to the tests,
// the suite stops at the first test after which it died, and teardown checks that it exits 0 on
// SIGTERM (then after() cleans up; QVL_E2E_LOG=1 prints the end of its log).
export function runServerSuite(name, args, { label = "server", started = () => {}, after = () => {} } = {}) {
  return runSuite(name, {
    async setup() {
      const s = await startServer(args);
      started(s);
      return s;
    },
    alive: (s) => running(s, label),
    async teardown(s) {
      const ex = await s.stop();
      check(ex.code === 0, `${label} exits 0 on SIGTERM`, ex);
      after();
      if (process.env.QVL_E2E_LOG) console.error(s.log().slice(-4000));
    },
  });
}
