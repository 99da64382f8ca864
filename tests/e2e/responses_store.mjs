// Stored Responses conversations (issue 24 item 3): a follow-up of a conversation holding 18 images
// is served from the store's processed form (token plan + image keys backed by the image cache),
// not by rebuilding the request with its image data URLs, so 16 concurrent small follow-ups keep
// the server's memory flat (RSS sampled from /proc/PID/status while they run); the `history` field
// trims on /v1/responses as on chat; a chat-shaped text.format is a 400.
// Prints "responses_store: N passed, N failed".
import { readFileSync } from "node:fs";
import { deflateSync } from "node:zlib";
import { MODEL_ID, check, client, postJson, errorOf, test, runServerSuite, sleep } from "./lib.mjs";

let S;

// ---- images: distinct noise PNGs (~770 KB each: the bytes are large, the pixels few once resized) ----

const CRC = new Int32Array(256).map((_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c;
});
function crc32(buf) {
  let c = -1;
  for (const b of buf) c = CRC[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function noisePng(w, h, seed) {
  let x = seed * 2654435761 >>> 0 || 1;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let i = 0; i < raw.length; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    raw[i] = i % (w * 3 + 1) === 0 ? 0 : x & 0xff;
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; ihdr[9] = 2; // 8-bit RGB
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([sig, chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw, { level: 0 })), chunk("IEND", Buffer.alloc(0))]);
}
const imageUrl = (i) => "data:image/png;base64," + noisePng(512, 500, i + 1).toString("base64");

function rssMb(pid) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/^VmRSS:\s+(\d+) kB/m);
  return m ? Number(m[1]) / 1024 : NaN;
}

// Follow-ups may use at most this much memory together beyond what the server held after the
// first turn. Today's rebuild copies the ~19 MB conversation five times per follow-up and keeps its
// decoded image bytes until the answer: 16 at once took well over 400 MB on this fixture.
const BUDGET_MB = 120;
const N_IMAGES = 18, N_FOLLOWUPS = 16;

test("responses: 16 concurrent follow-ups of an 18-image conversation stay within the memory budget", async () => {
  const c = client(S);
  const urls = Array.from({ length: N_IMAGES }, (_, i) => imageUrl(i));
  const parts = [];
  for (let i = 0; i < N_IMAGES; i++) parts.push({ type: "input_image", image_url: urls[i] });
  parts.push({ type: "input_text", text: "Describe these pictures." });
  const first = await c.responses.create({ model: MODEL_ID, input: [{ role: "user", content: parts }], max_output_tokens: 4, temperature: 0 });
  check(first.status === "completed" || first.status === "incomplete", "the 18-image turn is answered", first.status);
  parts.length = 0; // drop the client's copies before measuring
  await sleep(200);
  const pid = S.proc.pid;
  const base = rssMb(pid);
  let peak = base, sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, rssMb(pid));
      await sleep(5);
    }
  })();
  const t0 = Date.now();
  const replies = await Promise.allSettled(Array.from({ length: N_FOLLOWUPS }, (_, i) =>
    c.responses.create({ model: MODEL_ID, previous_response_id: first.id, input: `Which picture is the brightest? (${i})`, max_output_tokens: 4, temperature: 0 })));
  sampling = false;
  await sampler;
  const ok = replies.filter((r) => r.status === "fulfilled");
  check(ok.length === N_FOLLOWUPS, "every follow-up answered", replies.filter((r) => r.status === "rejected").map((r) => String(r.reason)).slice(0, 3));
  const grew = peak - base;
  console.error(`responses_store: RSS ${base.toFixed(0)} MB after the first turn, peak ${peak.toFixed(0)} MB during ${N_FOLLOWUPS} follow-ups (+${grew.toFixed(0)} MB, ${Date.now() - t0} ms)`);
  check(grew < BUDGET_MB, `follow-ups stay within ${BUDGET_MB} MB`, `+${grew.toFixed(0)} MB`);
  const r = ok[0]?.value;
  check(r && r.usage.input_tokens > first.usage.input_tokens, "a follow-up's prompt holds the stored conversation", [first.usage, r?.usage]);
  check(r && r.usage.input_tokens_details.cached_tokens > 0, "the conversation's KV is reused", r?.usage);
  // a follow-up of a follow-up: the processed form is stored again and still answers
  const second = await c.responses.create({ model: MODEL_ID, previous_response_id: r.id, input: "And the darkest?", max_output_tokens: 4, temperature: 0 });
  check(second.usage.input_tokens > r.usage.input_tokens, "a chain of follow-ups keeps its images", [r.usage, second.usage]);
  // a follow-up that preprocesses its images otherwise (larger max_pixels) re-reads their headers
  // from the stored bytes: more image tokens, still answered
  const bigger = await c.responses.create({ model: MODEL_ID, previous_response_id: first.id, input: "Which picture is the brightest? (0)",
    max_output_tokens: 4, temperature: 0, max_pixels: 16384 });
  check(bigger.usage.input_tokens > r.usage.input_tokens, "max_pixels of the follow-up applies to the stored images", [r.usage.input_tokens, bigger.usage.input_tokens]);
  // the same conversation sent in full (data URLs) reads as the same prompt
  const again = urls.map((u) => ({ type: "input_image", image_url: u }));
  again.push({ type: "input_text", text: "Describe these pictures." });
  const fr = await postJson(S, "/v1/responses", { model: MODEL_ID, max_output_tokens: 4, temperature: 0, input: [
    { role: "user", content: again },
    { role: "assistant", content: [{ type: "output_text", text: first.output_text }] },
    { role: "user", content: "Which picture is the brightest? (0)" }] });
  const full = JSON.parse(fr.body || "{}");
  const r0 = ok.map((x) => x.value).find((x) => x); // any follow-up: same prompt length for each index digit
  check(fr.status === 200 && full.usage?.input_tokens === r0.usage.input_tokens, "stored = sent in full (prompt tokens)", [fr.status, full.usage?.input_tokens, r0.usage.input_tokens]);
}, 300000);

// ---- the context policy on /v1/responses -----------------------------------------------------

const long = (n) => Array.from({ length: n }, (_, i) => `word${i % 50}`).join(" ");
const turns = () => [
  { role: "user", content: "First question: " + long(700) },
  { role: "assistant", content: [{ type: "output_text", text: "An answer." }] },
  { role: "user", content: "Second question: " + long(700) },
  { role: "assistant", content: [{ type: "output_text", text: "Another answer." }] },
  { role: "user", content: "Third question, short." },
];

test("responses: history trim drops the oldest turns; without them the context is a 400", async () => {
  const body = { model: MODEL_ID, input: turns(), max_output_tokens: 8, temperature: 0 };
  const plain = await postJson(S, "/v1/responses", body);
  check(plain.status === 400 && /context|tokens/.test(errorOf(plain)?.message || ""), "too long without a policy: 400", plain.body.slice(0, 300));
  const trimmed = await postJson(S, "/v1/responses", { ...body, history: "trim" });
  const tj = JSON.parse(trimmed.body || "{}");
  check(trimmed.status === 200 && tj.usage?.input_tokens < 2048, "history trim: answered with the oldest turns dropped", trimmed.body.slice(0, 300));
  // a stored conversation that outgrew the context: trimmed the same way
  const r1 = JSON.parse((await postJson(S, "/v1/responses", { model: MODEL_ID, input: "First question: " + long(700), max_output_tokens: 2 })).body);
  const next = { model: MODEL_ID, previous_response_id: r1.id, input: "Second question: " + long(700), max_output_tokens: 8 };
  const over = await postJson(S, "/v1/responses", next);
  check(over.status === 400, "stored conversation over the context: 400", over.body.slice(0, 200));
  const cut = await postJson(S, "/v1/responses", { ...next, history: "trim" });
  const cj = JSON.parse(cut.body || "{}");
  check(cut.status === 200 && cj.usage?.input_tokens < 2048 - 8, "history trim on a stored conversation", cut.body.slice(0, 300));
  const bad = await postJson(S, "/v1/responses", { ...body, history: "sometimes" });
  check(bad.status === 400 && errorOf(bad)?.param === "history", "a bad history value is a 400 naming it", bad.body.slice(0, 300));
});

test("responses: a chat-shaped text.format is refused, the flat one works", async () => {
  const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a"] };
  const nested = await postJson(S, "/v1/responses", { model: MODEL_ID, input: "x", max_output_tokens: 8,
    text: { format: { type: "json_schema", json_schema: { name: "n", schema } } } });
  const e = errorOf(nested);
  check(nested.status === 400 && e?.param === "text.format" && /json_schema/.test(e?.message || ""), "nested json_schema: 400 naming it", nested.body.slice(0, 300));
  const flat = await postJson(S, "/v1/responses", { model: MODEL_ID, input: "x", max_output_tokens: 24, temperature: 0,
    text: { format: { type: "json_schema", name: "n", schema } } });
  check(flat.status === 200, "flat json_schema: served", flat.body.slice(0, 300));
});

runServerSuite("responses_store", ["--max-images", "32", "--max-body-mb", "64", "--ctx", "2048", "--max-tokens", "256", "--default-max-pixels", "4096",
  "--max-batch-size", "8", "--queue", "32"], { started: (s) => (S = s) });
