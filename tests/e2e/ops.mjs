// Operator features (issue 13): the context policy (history trim, default max_tokens), config
// files in the seeds' nested layout and --print-config, settings validated at parse time, CPU
// affinity of the worker threads, the log file reopened on SIGHUP and JSON logs.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  QVL, MODEL, MMPROJ, here, check, sleep, withTimeout, dataUrl, startServer, postJson, errorOf, test, runServerSuite
} from "./lib.mjs";

let A; // --ctx 4096 --history trim --max-images 16
const tmp = mkdtempSync(join(tmpdir(), "qvl-ops-"));

function run(args, opts = {}) {
  return new Promise((res) => {
    execFile(QVL, args, { timeout: 30000, ...opts }, (err, stdout, stderr) =>
      res({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, stdout, stderr }));
  });
}

// A conversation of `turns` image turns (the last one is the question), each earlier answer long
// enough that the whole does not fit ctx 4096.
function imageConversation(turns, image = "rgb_333x250.png") {
  const url = dataUrl(image);
  const msgs = [{ role: "system", content: "You answer questions about pictures." }];
  for (let i = 0; i < turns; i++) {
    msgs.push({ role: "user", content: [{ type: "image_url", image_url: { url } }, { type: "text", text: `What is in picture ${i}?` }] });
    if (i < turns - 1) msgs.push({ role: "assistant", content: `Picture ${i} shows ` + "a small coloured test pattern, ".repeat(50) });
  }
  return msgs;
}

// ---- context policy ------------------------------------------------------------------------

test("trim: 12 image turns into ctx 4096 succeed, reporting what was dropped", async () => {
  const msgs = imageConversation(12);
  const full = await postJson(A, "/v1/chat/completions", { messages: msgs, max_tokens: 8, history: "error" });
  check(full.status === 400 && errorOf(full)?.code === "context_length_exceeded", "history error: the whole conversation is refused", full.body);
  const r = await postJson(A, "/v1/chat/completions", { messages: msgs, max_tokens: 8 });
  check(r.status === 200, "history trim (server default): 200", r.body.slice(0, 300));
  const u = JSON.parse(r.body).usage;
  const h = u?.history;
  check(h && h.policy === "trim" && h.turns === 12, "usage.history names the policy and the turns", u);
  check(h && h.dropped_turns > 0 && h.dropped_turns < 12 && h.kept_turns === 12 - h.dropped_turns, "older turns dropped, not all", h);
  check(h && h.dropped_images === h.dropped_turns && h.dropped_messages === 2 * h.dropped_turns, "each dropped turn took its image and answer", h);
  check(h && h.dropped_tokens > 0 && u.prompt_tokens + 8 <= 4096, "what is kept fits the context", u);
  const hdr = /x-qvl-history-dropped: (\d+)/i.exec(r.headers);
  check(hdr && Number(hdr[1]) === h?.dropped_turns, "X-Qvl-History-Dropped header", r.headers);
  check(/x-qvl-history-dropped-tokens: (\d+)/i.exec(r.headers)?.[1] === String(h?.dropped_tokens), "X-Qvl-History-Dropped-Tokens header", r.headers);
  // the fewest drops: one turn fewer would not fit
  const fewer = msgs.filter((m, i) => i === 0 || i > 2 * (h.dropped_turns - 1));
  const r2 = await postJson(A, "/v1/chat/completions", { messages: fewer, max_tokens: 8, history: "error" });
  check(r2.status === 400, "keeping one more turn would not have fit", r2.status);
  // the system message is kept: a conversation differing only in it gives a different prompt size
  const nosys = await postJson(A, "/v1/chat/completions", { messages: msgs.slice(1), max_tokens: 8 });
  const un = JSON.parse(nosys.body).usage;
  check(nosys.status === 200 && un.prompt_tokens !== u.prompt_tokens, "the system message is part of the trimmed prompt", [un.prompt_tokens, u.prompt_tokens]);
}, 240000);

test("trim streams too and the header comes with the stream", async () => {
  const r = await postJson(A, "/v1/chat/completions", { messages: imageConversation(12), max_tokens: 4, stream: true, stream_options: { include_usage: true } });
  check(r.status === 200 && /x-qvl-history-dropped: [1-9]/i.test(r.headers), "streamed: header", r.headers);
  const usage = r.body.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6))).find((c) => c.usage)?.usage;
  check(usage?.history?.dropped_turns > 0, "streamed: usage.history", usage);
}, 240000);

test("trim never drops the current turn: alone too long is still 400", async () => {
  const long = "word ".repeat(5000);
  const r = await postJson(A, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }, { role: "user", content: long }], max_tokens: 8 });
  check(r.status === 400 && errorOf(r)?.code === "context_length_exceeded", "current turn alone over ctx: 400", r.body);
  const bad = await postJson(A, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], history: "drop" });
  check(bad.status === 400 && errorOf(bad)?.param === "history", "unknown history value: 400 naming the field", bad.body);
});

test("default max_tokens fits the room left (3,176-token prompt, ctx 4096)", async () => {
  // tune a text prompt to 3,176 tokens with the server's own count (from its 400 message when too long)
  const promptOf = async (m) => {
    const probe = await postJson(A, "/v1/chat/completions", { messages: m, max_tokens: 1, history: "error" });
    if (probe.status === 200) return JSON.parse(probe.body).usage.prompt_tokens;
    const g = /prompt of (\d+) tokens/.exec(errorOf(probe)?.message || "");
    return g ? Number(g[1]) : NaN;
  };
  const text = (n) => [{ role: "user", content: "Please read: " + Array.from({ length: n }, (_, k) => `w${k % 97}`).join(" ") }];
  let words = 1000, n = 0, msgs;
  for (let i = 0; i < 12; i++) {
    msgs = text(words);
    n = await promptOf(msgs);
    if (!(n > 0) || n === 3176) break;
    const next = n > 3176 && words > 1 && Math.abs(n - 3176) < 4 ? words - 1 : Math.round(words * 3176 / n);
    words = next === words ? words + (n < 3176 ? 1 : -1) : next;
  }
  check(Math.abs(n - 3176) <= 3, "prompt of 3,176 tokens (or within 3)", n);
  const asked = await postJson(A, "/v1/chat/completions", { messages: msgs, max_tokens: 2048, history: "error" });
  check(asked.status === 400 && errorOf(asked)?.code === "context_length_exceeded", "an explicit max_tokens 2048 still does not fit", asked.body);
  const r = await postJson(A, "/v1/chat/completions", { messages: msgs, history: "error" });
  check(r.status === 200, "no max_tokens: 200", r.body.slice(0, 300));
  const ur = JSON.parse(r.body).usage;
  check(ur && ur.prompt_tokens + ur.completion_tokens <= 4096, "prompt + generated within ctx", ur);
  const fr = JSON.parse(r.body).choices?.[0]?.finish_reason;
  check(fr === "stop" || (fr === "length" && ur.completion_tokens === 4096 - ur.prompt_tokens), "stops at the room left (920 for 3,176)", [fr, ur]);
}, 300000);

test("--max-history-turns keeps the last N earlier turns", async () => {
  const s = await startServer(["--ctx", "4096", "--max-images", "16", "--max-history-turns", "3"]);
  try {
    const msgs = [];
    for (let i = 0; i < 6; i++) {
      msgs.push({ role: "user", content: `question ${i}` });
      if (i < 5) msgs.push({ role: "assistant", content: `answer ${i}` });
    }
    const r = await postJson(s, "/v1/chat/completions", { messages: msgs, max_tokens: 2 });
    const h = JSON.parse(r.body).usage?.history;
    check(r.status === 200 && h?.policy === "error" && h.dropped_turns === 2 && h.kept_turns === 4, "5 earlier turns, 3 kept (+ the current)", h);
    const one = [{ role: "user", content: "q" }, { role: "assistant", content: "a" }, { role: "user", content: "q2" }];
    const r1 = await postJson(s, "/v1/chat/completions", { messages: one, max_tokens: 2 });
    check(/x-qvl-history-dropped/i.test(r1.headers) === false && JSON.parse(r1.body).usage?.history?.dropped_turns === 0, "short conversations untouched, no header", r1.headers);
  } finally { await s.stop(); }
}, 120000);

// ---- settings ----------------------------------------------------------------------------------

test("settings: out-of-range values fail at parse time with a clear message", async () => {
  const cases = [
    [["--max-batch-size", "100"], /max_batch_size expects an integer in \[1, 64\], got '100'/],
    [["--history", "drop"], /history: expected error or trim, got 'drop'/],
    [["--log-format", "xml"], /log_format: expected logfmt or json/],
    [["--cpu-affinity", "3-1"], /runs backwards/],
    [["--nice", "40"], /nice expects an integer in \[-20, 19\]/],
    [["--dtype", "int3"], /dtype: expected f32, bf16/],
  ];
  for (const [args, re] of cases) {
    const t0 = Date.now();
    const r = await run(["serve", "-m", "/nonexistent/model.gguf", ...args]);
    check(r.code === 2 && re.test(r.stderr) && !/listening|loading/.test(r.stderr), `${args.join(" ")}: exit 2 before loading`, r.stderr);
    check(Date.now() - t0 < 10000, `${args.join(" ")}: fails fast`);
  }
});

test("--config: the seeds' nested YAML loads; --print-config shows the effective settings", async () => {
  const cfg = join(here, "ops/seeds-production.yaml");
  const r = await run(["serve", "--config", cfg, "--print-config"]);
  check(r.code === 0, "loads", r.stderr);
  const want = {
    hf: '"Qwen/Qwen3-VL-2B-Instruct"', dtype: '"bf16"', max_tokens: "512", ctx: "4096", cpu_affinity: '"0-3"', nice: "-5",
    max_wait_ms: "5", history: '"error"',
  };
  const got = Object.fromEntries(r.stdout.split("\n").filter((l) => /^[a-z_]+: /.test(l)).map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 2)]));
  for (const [k, v] of Object.entries(want)) check(got[k] === v, `effective ${k}: ${v}`, got[k]);
  check(/^# model: \(not set\)$/m.test(r.stdout), "unset settings printed as comments", r.stdout);
  const warn = r.stderr.match(/ignoring settings that mean nothing for qvl: (.*)/);
  check(warn && ["device_map", "offload_folder", "use_cache", "cache_type", "swap_size_gb"].every((k) => warn[1].includes(k)), "one warning naming the ignored keys", r.stderr);
  check((r.stderr.match(/ignoring settings/g) || []).length === 1, "exactly one warning");
  // the printed YAML is itself a valid config giving the same settings
  const again = join(tmp, "printed.yaml");
  writeFileSync(again, r.stdout);
  const r2 = await run(["serve", "--config", again, "--print-config"]);
  check(r2.code === 0 && r2.stdout.split("\n").slice(1).join("\n") === r.stdout.split("\n").slice(1).join("\n"), "--print-config output round-trips", r2.stderr);
  // flags beat the file; -m replaces the file's Hugging Face repository
  const r3 = await run(["serve", "--config", cfg, "-m", MODEL, "--ctx", "2048", "--print-config"]);
  check(r3.code === 0 && /^ctx: 2048$/m.test(r3.stdout) && /^# hf: \(not set\)$/m.test(r3.stdout) && r3.stdout.includes(MODEL), "flags override the file", r3.stdout + r3.stderr);
  // max_wait_time is in seconds
  const f4 = join(tmp, "wait.yaml");
  writeFileSync(f4, "system:\n  max_wait_time: 0.1\n  max_batch_size: 4\n");
  const r4 = await run(["serve", "--config", f4, "-m", MODEL, "--print-config"]);
  check(r4.code === 0 && /^max_wait_ms: 100$/m.test(r4.stdout) && /^max_batch_size: 4$/m.test(r4.stdout), "max_wait_time 0.1 s -> max_wait_ms 100", r4.stdout + r4.stderr);
  // any other unknown key still fails, with its line
  const f5 = join(tmp, "bad.yaml");
  writeFileSync(f5, "model:\n  torch_dtype: float32\ngeneration:\n  max_new_tokens: 64\n  temperature_schedule: cosine\n");
  const r5 = await run(["serve", "--config", f5, "-m", MODEL, "--print-config"]);
  check(r5.code === 2 && /bad\.yaml:5: unknown setting 'temperature_schedule'/.test(r5.stderr), "unknown nested key: its line number", r5.stderr);
  const f6 = join(tmp, "bad2.yaml");
  writeFileSync(f6, "generation:\n  max_new_tokens: 100000000\n");
  const r6 = await run(["serve", "--config", f6, "-m", MODEL, "--print-config"]);
  check(r6.code === 2 && /bad2\.yaml:2: max_tokens expects an integer/.test(r6.stderr), "alias out of range: its line number", r6.stderr);
});

// ---- process settings ----------------------------------------------------------------------

function cpusOfThreads(pid) {
  const out = {};
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      const st = readFileSync(`/proc/${pid}/task/${t}/status`, "utf8");
      out[t] = { name: /^Name:\s*(.*)$/m.exec(st)[1], cpus: /^Cpus_allowed_list:\s*(.*)$/m.exec(st)[1] };
    } catch { /* thread gone */ }
  }
  return out;
}

test("--cpu-affinity 0-1: the process on 0-1, worker threads one per core", async () => {
  const s = await startServer(["--cpu-affinity", "0-1", "--threads", "2"]);
  try {
    const st = readFileSync(`/proc/${s.proc.pid}/status`, "utf8");
    check(/^Cpus_allowed_list:\s*0-1$/m.test(st), "process Cpus_allowed_list 0-1", /Cpus_allowed_list.*/.exec(st)?.[0]);
    const threads = Object.values(cpusOfThreads(s.proc.pid));
    const single = threads.filter((t) => t.cpus === "1");
    check(single.length >= 1, "a worker thread pinned to CPU 1", threads);
    check(threads.every((t) => ["0-1", "0", "1"].includes(t.cpus)), "no thread outside 0-1", threads);
    const r = await postJson(s, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    check(r.status === 200, "serves while pinned", r.status);
  } finally { await s.stop(); }
  const s2 = await startServer(["--cpu-affinity", "1", "--threads", "2", "--nice", "5"]);
  try {
    const threads = Object.values(cpusOfThreads(s2.proc.pid));
    check(threads.every((t) => t.cpus === "1"), "--cpu-affinity 1: every thread on CPU 1", threads);
    const stat = readFileSync(`/proc/${s2.proc.pid}/stat`, "utf8");
    const nice = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
    check(nice === 5, "--nice 5 visible in /proc/PID/stat", nice);
  } finally { await s2.stop(); }
}, 120000);

// a server with --log-file: the port comes from the log
async function startLogged(extra) {
  const log = join(tmp, `qvl-${Date.now()}.log`);
  const proc = spawn(QVL, ["serve", "-m", MODEL, "--mmproj", MMPROJ, "--port", "0", "--threads", "2", "--log-file", log, ...extra], { stdio: "ignore" });
  const exit = new Promise((r) => proc.on("exit", (code, sig) => r({ code, sig })));
  let port = 0;
  await withTimeout((async () => {
    for (;;) {
      const m = existsSync(log) && /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(readFileSync(log, "utf8"));
      if (m) { port = Number(m[1]); break; }
      await sleep(50);
    }
    for (;;) {
      try { if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return; } catch { /* not yet */ }
      await sleep(50);
    }
  })(), 30000, "logged server start");
  return { log, proc, exit, base: `http://127.0.0.1:${port}`, async stop() { proc.kill("SIGTERM"); return withTimeout(exit, 20000, "stop"); } };
}

test("--log-file is reopened on SIGHUP (logrotate)", async () => {
  const s = await startLogged([]);
  try {
    await postJson(s, "/v1/chat/completions", { messages: [{ role: "user", content: "one" }], max_tokens: 2 });
    await sleep(100);
    renameSync(s.log, s.log + ".1");
    s.proc.kill("SIGHUP");
    for (let i = 0; i < 100 && !existsSync(s.log); i++) await sleep(20);
    check(existsSync(s.log), "a new log file after SIGHUP");
    await postJson(s, "/v1/chat/completions", { messages: [{ role: "user", content: "two" }], max_tokens: 2 });
    await sleep(200);
    const old = readFileSync(s.log + ".1", "utf8"), now = readFileSync(s.log, "utf8");
    check((old.match(/msg=request .*path=\/v1\/chat\/completions/g) || []).length === 1, "the first request logged in the rotated file", old.slice(-600));
    check((now.match(/msg=request .*path=\/v1\/chat\/completions/g) || []).length === 1, "the second request logged in the new file", now);
    check(/SIGHUP: reopened/.test(now), "the reopen is logged", now);
    const ex = await s.stop();
    check(ex.code === 0, "still exits 0 on SIGTERM", ex);
  } finally { s.proc.kill("SIGKILL"); }
}, 90000);

test("--log-format json: request lines are JSON objects", async () => {
  const s = await startLogged(["--log-format", "json"]);
  try {
    await postJson(s, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    await sleep(200);
    const lines = readFileSync(s.log, "utf8").split("\n").filter((l) => l.startsWith("{"));
    const req = lines.map((l) => { try { return JSON.parse(l); } catch { return null; } }).find((o) => o?.msg === "request" && o.path === "/v1/chat/completions");
    check(req && req.status === 200 && req.path === "/v1/chat/completions" && typeof req.completion_tokens === "number", "a parsable JSON request line", lines);
  } finally { await s.stop(); }
}, 60000);

// ---- loadtest ------------------------------------------------------------------------------

test("qvl loadtest: the table, the JSON and the chart from the real server", async () => {
  const svg = join(tmp, "lt.svg"), js = join(tmp, "lt.json");
  const r = await run(["loadtest", A.base, "--image", join(here, "../fixtures/images/photo_96x60.jpg"), "--levels", "1,2,4",
    "--requests", "4", "-n", "4", "--svg", svg, "--json", js], { timeout: 120000 });
  check(r.code === 0, "exits 0 when every request succeeds", r.stderr);
  const rows = r.stdout.split("\n").filter((l) => /^\| \d+ \|/.test(l));
  check(rows.length === 3 && rows.every((l) => l.includes("4/4 (100%)")), "one row per level, all succeeded", r.stdout);
  check(/^\| 1 \|[^|]*\|[^|]*\| 1\.00x \|/.test(rows[0] || ""), "speedup 1.00x at concurrency 1", rows[0]);
  const j = JSON.parse(readFileSync(js, "utf8"));
  check(j.levels.length === 3 && j.levels.map((l) => l.concurrency).join() === "1,2,4", "JSON levels", j);
  check(j.levels.every((l) => l.succeeded === 4 && l.generated_tokens > 0 && l.tok_s > 0 && l.peak_rss_mib > 1 &&
    l.ttft_p50_ms > 0 && l.e2e_p95_ms >= l.e2e_p50_ms && l.e2e_p50_ms >= l.ttft_p50_ms), "JSON figures are consistent", j.levels);
  const text = readFileSync(svg, "utf8");
  check(text.startsWith("<svg") && (text.match(/<polyline/g) || []).length === 5 && text.trim().endsWith("</svg>"), "an SVG with the 5 series", text.slice(0, 200));
  const m = await (await fetch(A.base + "/metrics")).text();
  check(/^qvl_process_resident_memory_peak_bytes \d+/m.test(m), "/metrics has the peak RSS gauge");
  const bad = await run(["loadtest", A.base]);
  check(bad.code === 2 && /--image FILE is required/.test(bad.stderr), "without --image: usage error", bad.stderr);
  const down = await run(["loadtest", "http://127.0.0.1:1", "--image", join(here, "../fixtures/images/photo_96x60.jpg")]);
  check(down.code === 1 && /warm-up request failed/.test(down.stderr), "a server that is not there: exit 1 with the reason", down.stderr);
}, 180000);

runServerSuite("e2e-ops", ["--ctx", "4096", "--history", "trim", "--max-images", "16"], { label: "ops server", started: (s) => (A = s), after: () => rmSync(tmp, { recursive: true, force: true }) });
