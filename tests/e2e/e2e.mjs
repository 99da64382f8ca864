// End-to-end tests of `qvl serve` with the e2e fixture models: a real OpenAI client (the `openai`
// npm package) for chat with images, plain and streamed; curl for error statuses; concurrency
// (16 requests equal their solo greedy runs), back-pressure (503 at once), disconnects, caches,
// jobs, metrics, API keys, config errors and SIGTERM draining. Each server is started on a free
// loopback port (--port 0) and stopped here. Prints "e2e-core: N passed, N failed".
import { spawnSync } from "node:child_process";
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import {
  root, QVL, MODEL, MODEL_ID, check, sleep, dataUrl, startServer, client, curl, postJson, errorOf,
  metrics, waitMetric, userMsg, withTimeout, test, runServerSuite, fixtureImageHost
} from "./lib.mjs";

// ---- tests -------------------------------------------------------------------------------------

let A; // the main server
let soloCache = new Map();

async function solo(msgs, max_tokens = 24) {
  const key = JSON.stringify([msgs, max_tokens]);
  if (!soloCache.has(key)) {
    const r = await client(A).chat.completions.create({ model: MODEL_ID, messages: msgs, max_tokens, temperature: 0 });
    soloCache.set(key, r.choices[0].message.content);
  }
  return soloCache.get(key);
}

test("health, models", async () => {
  const h = await fetch(A.base + "/health");
  check(h.status === 200 && (await h.json()).status === "ok", "health ok");
  const list = await client(A).models.list();
  const ids = list.data.map((m) => m.id);
  check(ids.includes(MODEL_ID), "models.list has the model", ids);
  const one = await client(A).models.retrieve("qvl");
  check(one.id === "qvl", "retrieve the qvl alias");
});

test("plain chat with an image (openai client)", async () => {
  const r = await client(A).chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: "system", content: "You describe images." }, userMsg("What is in this picture?", "rgb_64x64.png")],
    max_tokens: 16, temperature: 0,
  });
  check(r.object === "chat.completion" && r.id.startsWith("chatcmpl-"), "object and id", r);
  check(r.model === MODEL_ID, "model echoed", r.model);
  const c = r.choices[0];
  check(c.message.role === "assistant" && typeof c.message.content === "string" && c.message.content.length > 0, "content", c);
  check(["stop", "length"].includes(c.finish_reason), "finish_reason", c.finish_reason);
  check(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 16, "completion_tokens", r.usage);
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens", r.usage);
  check(r.timings && r.timings.image_tokens > 0 && r.usage.prompt_tokens > r.timings.image_tokens, "image tokens in timings", r.timings);
  for (const k of ["ttft_ms", "prefill_tok_s", "decode_tok_s", "queue_ms", "cached_prompt_tokens"])
    check(typeof r.timings[k] === "number", `timings.${k}`, r.timings);
  for (const k of ["image_cache_hit", "prefix_cache_hit"]) check(typeof r.timings[k] === "boolean", `timings.${k}`, r.timings);
});

test("streamed chat with an image equals the plain answer", async () => {
  const msgs = [userMsg("Describe the colors.", "photo_96x60.jpg")];
  const plain = await solo(msgs, 20);
  const stream = await client(A).chat.completions.create({
    model: MODEL_ID, messages: msgs, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  // The server may coalesce tokens that pile up while the client reads into one chunk, so the number
  // of chunks depends on timing: their objects are checked all at once, one assertion.
  let text = "", chunks = 0, finish = null, usage = null, role = null;
  const objects = new Set();
  for await (const ch of stream) {
    chunks++;
    objects.add(ch.object);
    if (ch.usage) usage = ch.usage;
    if (!ch.choices.length) continue;
    const d = ch.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  check(chunks >= 3, "several chunks", chunks);
  check(objects.size === 1 && objects.has("chat.completion.chunk"), "every chunk's object is chat.completion.chunk", [...objects]);
  check(role === "assistant", "role in the first delta");
  check(text === plain, "streamed text equals the non-streamed greedy text", { text, plain });
  check(["stop", "length"].includes(finish), "finish_reason in the last chunk", finish);
  check(usage && usage.completion_tokens > 0 && usage.prompt_tokens > 0, "usage chunk", usage);
  // raw framing, through curl: every event is "data: ...\n\n" and the last is [DONE]
  const raw = await postJson(A, "/v1/chat/completions", { messages: msgs, max_tokens: 5, temperature: 0, stream: true });
  check(raw.status === 200 && /content-type: text\/event-stream/i.test(raw.headers), "SSE content type", raw.headers);
  check(/^(data: [^\n]+\n\n)+$/.test(raw.body) && raw.body.endsWith("data: [DONE]\n\n"), "SSE framing", raw.body.slice(-200));
});

test("image cache and prefix cache", async () => {
  const m0 = await metrics(A);
  const img = "scene_64x128.png";
  const turn1 = [userMsg("Describe this image in a few words, please.", img)];
  const r1 = await client(A).chat.completions.create({ model: MODEL_ID, messages: turn1, max_tokens: 12, temperature: 0 });
  const m1 = await metrics(A);
  check(m1.qvl_image_cache_misses_total === m0.qvl_image_cache_misses_total + 1, "first sight of an image: a miss", [m0.qvl_image_cache_misses_total, m1.qvl_image_cache_misses_total]);
  check(r1.timings.image_cache_hit === false, "timings: no image cache hit the first time");
  // the encode lands in the vision-encode histogram, its tokens in the image-token one
  check(m1.qvl_vision_encode_seconds_count === m0.qvl_vision_encode_seconds_count + 1 &&
    m1.qvl_vision_encode_seconds_sum > m0.qvl_vision_encode_seconds_sum, "vision-encode histogram moved by one encode",
    [m0.qvl_vision_encode_seconds_count, m1.qvl_vision_encode_seconds_count, m0.qvl_vision_encode_seconds_sum, m1.qvl_vision_encode_seconds_sum]);
  check(m1.qvl_image_tokens_count === m0.qvl_image_tokens_count + 1 &&
    m1.qvl_image_tokens_sum - m0.qvl_image_tokens_sum === r1.timings.image_tokens && r1.timings.image_tokens > 0,
    "image-token histogram counts the image's tokens", [m0.qvl_image_tokens_sum, m1.qvl_image_tokens_sum, r1.timings.image_tokens]);
  // the same image in another prompt (the question first, so the two prompts part before the
  // image): the image cache skips the vision tower
  const askFirst = [{ role: "user", content: [{ type: "text", text: "Any people in it?" }, { type: "image_url", image_url: { url: dataUrl(img) } }] }];
  const r2 = await client(A).chat.completions.create({ model: MODEL_ID, messages: askFirst, max_tokens: 8, temperature: 0 });
  const m2 = await metrics(A);
  check(m2.qvl_image_cache_hits_total === m1.qvl_image_cache_hits_total + 1, "same image again: a hit", [m1.qvl_image_cache_hits_total, m2.qvl_image_cache_hits_total]);
  check(r2.timings.image_cache_hit === true, "timings.image_cache_hit", r2.timings);
  check(m2.qvl_vision_encode_seconds_count === m1.qvl_vision_encode_seconds_count &&
    m2.qvl_image_tokens_count === m1.qvl_image_tokens_count + 1, "a cached image: no encode, its tokens counted",
    [m1.qvl_vision_encode_seconds_count, m2.qvl_vision_encode_seconds_count, m1.qvl_image_tokens_count, m2.qvl_image_tokens_count]);
  // the same image first, another question after it: the image lies wholly in the cached prefix
  // (restored up to the first other token, not rounded down to whole blocks), so nothing of it is
  // computed and the image cache is not even asked
  const r2b = await client(A).chat.completions.create({ model: MODEL_ID, messages: [userMsg("Any animals in it?", img)], max_tokens: 8, temperature: 0 });
  check(r2b.timings.prefix_cache_hit === true && r2b.timings.cached_prompt_tokens > r1.timings.image_tokens &&
    r2b.timings.vision_ms === 0 && r2b.timings.image_cache_hit === false, "same image, another question after it: all from the prefix cache", r2b.timings);
  // a follow-up turn reuses the conversation's KV
  const turn2 = [...turn1, { role: "assistant", content: r1.choices[0].message.content }, { role: "user", content: "And the colors?" }];
  const r3 = await client(A).chat.completions.create({ model: MODEL_ID, messages: turn2, max_tokens: 8, temperature: 0 });
  const m3 = await metrics(A);
  check(r3.timings.prefix_cache_hit === true && r3.timings.cached_prompt_tokens > 0, "follow-up: prefix cache hit", r3.timings);
  check(r3.usage.prompt_tokens_details?.cached_tokens === r3.timings.cached_prompt_tokens, "usage.prompt_tokens_details.cached_tokens", r3.usage);
  check(m3.qvl_prefix_cache_hits_total >= m2.qvl_prefix_cache_hits_total + 1, "prefix hit metric", [m2.qvl_prefix_cache_hits_total, m3.qvl_prefix_cache_hits_total]);
});

test("errors (curl)", async () => {
  const msgs = [{ role: "user", content: "hi" }];
  let r = await postJson(A, "/v1/chat/completions", '{"messages": [');
  check(r.status === 400 && errorOf(r)?.type === "invalid_request_error" && errorOf(r)?.code === "invalid_json", "bad JSON -> 400", r);
  r = await postJson(A, "/v1/chat/completions", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64," + Buffer.from("this is not a png file at all").toString("base64") } }, { type: "text", text: "?" }] }] });
  check(r.status === 400 && errorOf(r)?.message, "bad image -> 400", r);
  r = await postJson(A, "/v1/chat/completions", { messages: [userMsg("x", "rgb_64x64.png")], max_tokens: 4, max_pixels: 10 });
  check(r.status === 400 && errorOf(r)?.param === "max_pixels", "max_pixels below the minimum -> 400", r);
  r = await postJson(A, "/v1/chat/completions", { messages: [{ role: "user", content: "x".repeat(2 << 20) }] });
  check(r.status === 413 && errorOf(r)?.code === "request_too_large", "body over --max-body-mb -> 413", { status: r.status, body: r.body.slice(0, 200) });
  r = await postJson(A, "/v1/chat/completions", { model: "gpt-4o", messages: msgs });
  check(r.status === 404 && errorOf(r)?.code === "model_not_found", "unknown model -> 404", r);
  r = await postJson(A, "/v1/chat/completions", { messages: msgs, n: 2 });
  check(r.status === 400 && errorOf(r)?.param === "n", "n=2 -> 400", r);
  r = await postJson(A, "/v1/chat/completions", { messages: msgs, temperature: "warm" });
  check(r.status === 400 && errorOf(r)?.param === "temperature", "wrong type -> 400", r);
  r = await postJson(A, "/v1/chat/completions", { messages: [userMsg("x", "rgb_64x64.png"), userMsg("y", "rgb_64x64.png"), userMsg("z", "rgb_64x64.png")], max_tokens: 4 });
  check(r.status === 400 && errorOf(r)?.code === "too_many_images", "three images over --max-images 2 -> 400", r);
  r = await curl([A.base + "/v1/chat/completions"]);
  check(r.status === 405 && /allow: POST/i.test(r.headers) && errorOf(r)?.type === "invalid_request_error", "GET chat -> 405", r);
  // precision: the tier the tower was loaded in is served, the other one is refused naming it
  const tiers = [];
  for (const p of ["exact", "fast"]) tiers.push(await postJson(A, "/v1/chat/completions", { messages: msgs, max_tokens: 2, precision: p }));
  const other = tiers.find((t) => t.status === 400);
  check(tiers.filter((t) => t.status === 200).length === 1 && other && errorOf(other)?.param === "precision" &&
    /loaded in the "(exact|fast)" tier/.test(errorOf(other)?.message), "precision: loaded tier 200, other 400", tiers.map((t) => [t.status, t.body.slice(0, 200)]));
  r = await postJson(A, "/v1/chat/completions", { messages: msgs, precision: "turbo" });
  check(r.status === 400 && errorOf(r)?.param === "precision", "precision turbo -> 400", r);
  r = await curl([A.base + "/v1/unknown"]);
  check(r.status === 404 && errorOf(r), "unknown endpoint -> 404", r);
  // context overflow: a prompt longer than --ctx
  r = await postJson(A, "/v1/chat/completions", { messages: [{ role: "user", content: "word ".repeat(5000) }], max_tokens: 8 });
  check(r.status === 400 && errorOf(r)?.code === "context_length_exceeded", "context overflow -> 400", { status: r.status, body: r.body.slice(0, 300) });
  // the openai client maps the error bodies to its exception classes
  try {
    await client(A).chat.completions.create({ model: "gpt-4o", messages: msgs });
    check(false, "openai client: unknown model throws");
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found", "openai client: NotFoundError", { status: e.status, code: e.code });
  }
});

test("16 concurrent requests equal their solo runs", async () => {
  const images = ["rgb_64x64.png", "photo_96x60.jpg", "gray_72x56.png", "rgba_96x64.png", null, null, null, null];
  const reqs = [];
  for (let i = 0; i < 16; i++) {
    const img = images[i % images.length];
    reqs.push([userMsg(`Request ${i}: say something about ${["cats", "boats", "trees", "rain"][i % 4]} number ${i * 7}.`, img)]);
  }
  const solos = [];
  for (const msgs of reqs) solos.push(await solo(msgs, 24));
  const m0 = await metrics(A);
  const t0 = Date.now();
  const outs = await Promise.all(reqs.map(async (msgs, i) => {
    if (i % 2 === 0) {
      const r = await client(A).chat.completions.create({ model: MODEL_ID, messages: msgs, max_tokens: 24, temperature: 0 });
      return r.choices[0].message.content;
    }
    const st = await client(A).chat.completions.create({ model: MODEL_ID, messages: msgs, max_tokens: 24, temperature: 0, stream: true });
    let t = "";
    for await (const ch of st) t += ch.choices[0]?.delta?.content || "";
    return t;
  }));
  let same = 0;
  outs.forEach((o, i) => { if (check(o === solos[i], `concurrent request ${i} equals its solo run`, { concurrent: o, solo: solos[i] })) same++; });
  const m1 = await metrics(A);
  check(m1['qvl_requests_total{result="ok"}'] - m0['qvl_requests_total{result="ok"}'] === 16, "16 requests done", [m0['qvl_requests_total{result="ok"}'], m1['qvl_requests_total{result="ok"}']]);
  console.error(`  16 concurrent requests: ${same}/16 equal to solo, ${Date.now() - t0} ms`);
});

test("jobs", async () => {
  const msgs = [userMsg("A job about this image.", "rgb_50x30.png")];
  const want = await solo(msgs, 16);
  let r = await postJson(A, "/v1/jobs", { model: MODEL_ID, messages: msgs, max_tokens: 16, temperature: 0 });
  const j = JSON.parse(r.body);
  check(r.status === 202 && j.status === "queued" && j.id.startsWith("job-"), "POST /v1/jobs -> 202 queued", r);
  let job;
  const t0 = Date.now();
  do {
    await sleep(20);
    job = await (await fetch(`${A.base}/v1/jobs/${j.id}`)).json();
  } while (["queued", "running"].includes(job.status) && Date.now() - t0 < 20000);
  check(job.status === "done", "job done", job);
  check(job.result?.choices?.[0]?.message?.content === want, "job result equals the direct answer", { got: job.result?.choices?.[0]?.message?.content, want });
  r = await postJson(A, "/v1/jobs", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] });
  check(r.status === 400, "a job that can never run is refused up front", r);
  r = await curl([`${A.base}/v1/jobs/job-doesnotexist`]);
  check(r.status === 404 && errorOf(r)?.code === "job_not_found", "unknown job -> 404", r);
});

test("metrics", async () => {
  const text = await (await fetch(A.base + "/metrics")).text();
  for (const name of ["qvl_queue_length", "qvl_running_sequences", "qvl_ttft_seconds_bucket", "qvl_request_latency_seconds_count",
    "qvl_decode_tokens_per_second", "qvl_image_cache_hits_total", "qvl_image_cache_misses_total", "qvl_prefix_cache_hits_total",
    "qvl_prefix_cache_misses_total", "qvl_vision_encode_seconds_bucket", "qvl_image_tokens_bucket", "qvl_kv_cache_used_bytes", "qvl_kv_cache_total_bytes", "qvl_process_resident_memory_bytes", "qvl_generated_tokens_total"])
    check(text.includes("\n" + name) || text.startsWith(name), `metric ${name}`);
  const m = await metrics(A);
  check(m.qvl_process_resident_memory_bytes > 1e6, "RSS", m.qvl_process_resident_memory_bytes);
  check(m.qvl_kv_cache_total_bytes > 0, "KV total", m.qvl_kv_cache_total_bytes);
  check(m['qvl_ttft_seconds_bucket{le="+Inf"}'] >= 16, "TTFT histogram count", m['qvl_ttft_seconds_bucket{le="+Inf"}']);
});

test("queue overflow answers 503 at once; disconnects free the slot; SIGTERM drains", async () => {
  const B = await startServer(["--queue", "1", "--max-batch-size", "1", "--max-tokens", "6000", "--ctx", "8192"]);
  try {
    const long = { model: MODEL_ID, messages: [{ role: "user", content: "Hello" }], max_tokens: 6000, temperature: 0 };
    // r1 runs (streaming, first chunk seen), r2 waits in the queue, r3 finds the queue full
    const s1 = await client(B).chat.completions.create({ ...long, stream: true });
    const it1 = s1[Symbol.asyncIterator]();
    await it1.next();
    const ac2 = new AbortController();
    const p2 = client(B).chat.completions.create(long, { signal: ac2.signal }).catch((e) => e);
    const q = await waitMetric(B, "qvl_queue_length", (v) => v === 1, 5000);
    check(q === 1, "second request queued", q);
    const t0 = Date.now();
    const r3 = await postJson(B, "/v1/chat/completions", long);
    const dt = Date.now() - t0;
    check(r3.status === 503 && /retry-after: \d+/i.test(r3.headers) && errorOf(r3)?.type === "server_error", "queue full -> 503 + Retry-After", r3);
    check(dt < 1000, "503 comes promptly", dt);
    // the clients go away: the stream mid-way, the queued one while waiting
    await it1.return();
    ac2.abort();
    await p2;
    // Both disconnects must be noticed (the queued request may first be admitted when the stream's
    // slot frees, and only then seen gone), then nothing may be left running or queued.
    const disc = await waitMetric(B, "qvl_client_disconnects_total", (v) => v >= 2, 5000);
    check(disc >= 2, "disconnect metric", disc);
    const run = await waitMetric(B, "qvl_running_sequences", (v) => v === 0, 5000);
    const ql = await waitMetric(B, "qvl_queue_length", (v) => v === 0, 5000);
    check(run === 0 && ql === 0, "slots freed after disconnects", { running: run, queued: ql });
    const m = await metrics(B);
    check(m.qvl_rejected_busy_total === 1, "rejected metric", m.qvl_rejected_busy_total);
    // SIGTERM while a request runs: it completes, then the process exits 0
    const s4 = await client(B).chat.completions.create({ ...long, max_tokens: 1000, stream: true, stream_options: { include_usage: true } });
    const it4 = s4[Symbol.asyncIterator]();
    await it4.next();
    B.proc.kill("SIGTERM");
    let finish = null, usage = null;
    for (;;) {
      const { value, done } = await it4.next();
      if (done) break;
      if (value.choices[0]?.finish_reason) finish = value.choices[0].finish_reason;
      if (value.usage) usage = value.usage;
    }
    check(finish === "length" && usage?.completion_tokens === 1000, "the running request finished during the drain", { finish, usage });
    const ex = await withTimeout(B.exit, 15000, "exit after SIGTERM");
    check(ex.code === 0, "exit code 0 after SIGTERM", ex);
    check(/draining/.test(B.log()) && /stopped/.test(B.log()), "drain logged", B.log().slice(-500));
  } finally {
    await B.stop();
  }
}, 120000);

test("request timeout: 504, or an error event once streaming", async () => {
  const D = await startServer(["--timeout-s", "1", "--max-tokens", "6000"]);
  try {
    const long = { messages: [{ role: "user", content: "Hello" }], max_tokens: 6000, temperature: 0 };
    const t0 = Date.now();
    let r = await postJson(D, "/v1/chat/completions", long);
    check(r.status === 504 && errorOf(r)?.code === "timeout", "non-streamed -> 504 timeout", { status: r.status, body: r.body.slice(0, 300) });
    check(Date.now() - t0 < 5000, "within the time limit", Date.now() - t0);
    r = await postJson(D, "/v1/chat/completions", { ...long, stream: true });
    const events = r.body.split("\n\n").filter((e) => e);
    const err = events.find((e) => e.startsWith('data: {"error":'));
    check(r.status === 200 && err && JSON.parse(err.slice(6)).error.code === "timeout", "streamed: an error event", r.body.slice(-400));
    check(events[events.length - 1] === "data: [DONE]", "then [DONE]", events.slice(-2));
    const m = await metrics(D);
    check(m.qvl_running_sequences === 0, "slot freed after the timeout", m.qvl_running_sequences);
  } finally {
    await D.stop();
  }
});

test("http image URLs only from allow-listed prefixes", async () => {
  // a small image host: the fixture images, a redirect, a 404
  const host = await fixtureImageHost();
  const hp = host.port;
  const E = await startServer(["--allow-image-url", `http://127.0.0.1:${hp}/`]);
  try {
    const ask = (url) => ({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }, { type: "text", text: "What is this?" }] }], max_tokens: 12, temperature: 0 });
    const viaData = await client(E).chat.completions.create({ model: MODEL_ID, ...ask(dataUrl("rgb_64x64.png")) });
    const viaUrl = await client(E).chat.completions.create({ model: MODEL_ID, ...ask(`http://127.0.0.1:${hp}/rgb_64x64.png`) });
    check(viaUrl.choices[0].message.content === viaData.choices[0].message.content, "the fetched image gives the data-URL answer", [viaUrl.choices[0].message.content, viaData.choices[0].message.content]);
    let r = await postJson(E, "/v1/chat/completions", ask(`http://localhost:${hp}/rgb_64x64.png`));
    check(r.status === 400 && /not allowed/.test(errorOf(r)?.message), "another host -> 400", r);
    r = await postJson(E, "/v1/chat/completions", ask(`http://127.0.0.1:${hp}/missing.png`));
    check(r.status === 400 && /404/.test(errorOf(r)?.message), "a 404 image -> 400", r);
    r = await postJson(E, "/v1/chat/completions", ask(`http://127.0.0.1:${hp}/redirect.png`));
    check(r.status === 400 && /redirect/.test(errorOf(r)?.message), "redirects are not followed", r);
    r = await postJson(A, "/v1/chat/completions", ask(`http://127.0.0.1:${hp}/rgb_64x64.png`));
    check(r.status === 400, "no allow list: remote URLs refused", r);
    r = await postJson(E, "/v1/chat/completions", ask(join(root, "tests/fixtures/images/rgb_64x64.png")));
    check(r.status === 400 && /local file/.test(errorOf(r)?.message), "local paths refused", r);
  } finally {
    await E.stop();
    host.close();
  }
});

test("API keys (flag beats environment)", async () => {
  const C = await startServer(["--api-key", "sk-flag"], { QVL_API_KEY: "sk-env" });
  try {
    const msgs = [{ role: "user", content: "hi" }];
    let r = await postJson(C, "/v1/chat/completions", { messages: msgs, max_tokens: 2 });
    check(r.status === 401 && errorOf(r)?.code === "invalid_api_key", "no key -> 401", r);
    r = await postJson(C, "/v1/chat/completions", { messages: msgs, max_tokens: 2 }, ["-H", "Authorization: Bearer sk-env"]);
    check(r.status === 401, "the environment's key is overridden by the flag", r.status);
    r = await postJson(C, "/v1/chat/completions", { messages: msgs, max_tokens: 2 }, ["-H", "Authorization: Bearer sk-flag"]);
    check(r.status === 200, "right key -> 200", r);
    try {
      await client(C, "sk-wrong").models.list();
      check(false, "openai client with a wrong key throws");
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError && e.status === 401, "openai client: AuthenticationError", e.status);
    }
    const ok = await client(C, "sk-flag").models.list();
    check(ok.data[0].id === MODEL_ID, "openai client with the key");
    const h = await fetch(C.base + "/health");
    check(h.status === 200, "/health needs no key");
  } finally {
    const ex = await C.stop();
    check(ex.code === 0, "clean exit", ex);
  }
});

test("config file errors", async () => {
  const dir = mkdtempSync(join(tmpdir(), "qvl-e2e-"));
  try {
    const f = join(dir, "serve.yaml");
    writeFileSync(f, `port: 0\nmax_batch_sise: 4\n`);
    const r = spawnSync(QVL, ["serve", "-m", MODEL, "--config", f], { encoding: "utf8", timeout: 20000 });
    check(r.status === 2 && r.stderr.includes("serve.yaml:2: unknown setting 'max_batch_sise'"), "unknown YAML key with its line", r.stderr);
    const r2 = spawnSync(QVL, ["serve", "-m", MODEL, "--porrt", "1"], { encoding: "utf8", timeout: 20000 });
    check(r2.status === 2 && r2.stderr.includes("unknown option '--porrt'"), "unknown flag", r2.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---- runner ------------------------------------------------------------------------------------

runServerSuite("e2e-core", ["--max-body-mb", "1", "--ctx", "4096", "--max-images", "2"], { label: "main server", started: (s) => (A = s) });
