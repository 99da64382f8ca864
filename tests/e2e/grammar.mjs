// Constrained decoding under hostile schemas and structured output kept byte for byte (issues 24
// and 22): schemas whose automaton cannot make progress are refused with 400 on every path
// (chat response_format, Responses text.format, Ollama format, jobs, tool parameters) while a
// bystander streams; SIGTERM with a constrained request in flight drains within --drain-timeout-s;
// tool-call arguments forced by logit_bias to 24-digit integers and long decimals come back as
// the model wrote them.
import { check, client, errorOf, postJson, running, runSuite, sleep, startServer, test, withTimeout, MODEL_ID } from "./lib.mjs";

let A;
const msgs = [{ role: "user", content: "Give me JSON." }];
// The attack of issue 24: ~200 bytes that made every byte of the mask walk 73 x 9^7 stacks.
const attack = { anyOf: [...Array(8).fill({ $ref: "#" }), { type: "null" }] };
const hostile = [
  ["anyOf of 8 self-references + null", attack, /left recursion/],
  ["$ref to itself", { $ref: "#" }, /no finite JSON value/],
  ["a -> b -> a", { $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, /\$ref '#\/\$defs\/[ab]'/],
  ["nullable + self-reference", { anyOf: [{ $ref: "#" }], nullable: true }, /left recursion/],
  ["required self", { type: "object", properties: { a: { $ref: "#" } }, required: ["a"] }, /no finite JSON value/],
];
const rf = (schema) => ({ type: "json_schema", json_schema: { name: "x", schema } });

// A bystander streams while fn runs; returns the largest gap between its chunks (ms).
async function withBystander(fn) {
  const stream = await client(A).chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "Tell a story." }], max_tokens: 48, temperature: 0, stream: true, ignore_eos: true });
  const gaps = [];
  const reading = (async () => { let t = Date.now(); for await (const _ of stream) { const n = Date.now(); gaps.push(n - t); t = n; } })();
  await fn();
  await withTimeout(reading, 30000, "bystander stream");
  return { chunks: gaps.length, maxGap: Math.max(0, ...gaps.slice(1)) };
}

test("hostile schemas: 400 naming the construct on chat, Responses, Ollama, jobs and tool parameters; a bystander streams", async () => {
  const by = await withBystander(async () => {
    for (const [name, schema, re] of hostile) {
      const t0 = Date.now();
      const r = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: msgs, max_tokens: 8, response_format: rf(schema) });
      const e = errorOf(r);
      check(r.status === 400 && e && re.test(e.message) && Date.now() - t0 < 5000, `chat response_format, ${name}: 400 naming it`, { status: r.status, e });
    }
    const paths = [
      ["Responses text.format", "/v1/responses", { model: MODEL_ID, input: "x", max_output_tokens: 8, text: { format: { type: "json_schema", name: "x", schema: attack } } }],
      ["Ollama format", "/api/chat", { model: MODEL_ID, stream: false, messages: msgs, format: attack }],
      ["jobs", "/v1/jobs", { model: MODEL_ID, messages: msgs, max_tokens: 8, response_format: rf(attack) }],
      ["tool parameters", "/v1/chat/completions", { model: MODEL_ID, messages: msgs, max_tokens: 8, tool_choice: "required", tools: [{ type: "function", function: { name: "f", parameters: attack } }] }],
    ];
    for (const [name, path, body] of paths) {
      const t0 = Date.now();
      const r = await postJson(A, path, body);
      check(r.status === 400 && /left recursion/.test(r.body) && Date.now() - t0 < 5000, `${name}: 400 naming the left recursion`, { status: r.status, body: r.body.slice(0, 300) });
    }
  });
  check(by.chunks >= 10 && by.maxGap < 5000, "the bystander streamed throughout", by);
}, 90000);

test("a wide recursive schema (64 alternatives) is served within the normal per-token cost next to a bystander", async () => {
  const alts = [];
  for (let k = 0; k < 16; k++) alts.push({ anyOf: [{ const: k }, { type: "object", properties: { ["k" + k]: { type: "integer" } }, required: ["k" + k] }, { type: "array", items: { $ref: "#" }, maxItems: 2 }, { const: "s" + k }] });
  let r, ms;
  const by = await withBystander(async () => {
    const t0 = Date.now();
    r = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: msgs, max_tokens: 48, temperature: 0, response_format: rf({ anyOf: alts }) });
    ms = Date.now() - t0;
  });
  const body = JSON.parse(r.body || "{}");
  const u = body.usage || {};
  check(r.status === 200, "served", r.body.slice(0, 300));
  // A plain request of as many tokens for comparison (same server, same moment).
  const t1 = Date.now();
  const p = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: msgs, max_tokens: u.completion_tokens || 1, temperature: 0, ignore_eos: true });
  const plainMs = Date.now() - t1;
  check(p.status === 200 && ms < 10 * plainMs + 3000, "within a bounded multiple of a plain request", { ms, plainMs, tokens: u.completion_tokens });
  check(by.chunks >= 10 && by.maxGap < 5000, "the bystander streamed throughout", by);
}, 90000);

// Forces the tool call's arguments: greedy over logits where bias wins wherever the grammar allows it.
async function forcedCall(path, params, bias) {
  if (path === "/v1/chat/completions")
    return postJson(A, path, { model: MODEL_ID, messages: msgs, max_tokens: 80, temperature: 0, logit_bias: bias, tool_choice: "required", tools: [{ type: "function", function: { name: "f", parameters: params } }] });
  return postJson(A, path, { model: MODEL_ID, input: "x", max_output_tokens: 80, temperature: 0, logit_bias: bias, tool_choice: "required", tools: [{ type: "function", name: "f", parameters: params }] });
}
const argsOf = (path, r) => {
  const j = JSON.parse(r.body || "{}");
  if (path === "/v1/chat/completions") return j.choices?.[0]?.message?.tool_calls?.[0]?.function?.arguments;
  return (j.output || []).find((o) => o.type === "function_call")?.arguments;
};

test("tool-call arguments are the model's bytes: a 23-24 digit integer and a 22-24 byte decimal on chat and Responses", async () => {
  // "3" is token 18, "0" 15, "." 13 in the Qwen vocabulary.
  const days = { type: "object", properties: { days: { type: "integer" } }, required: ["days"], additionalProperties: false };
  const x = { type: "object", properties: { x: { type: "number" } }, required: ["x"], additionalProperties: false };
  for (const path of ["/v1/chat/completions", "/v1/responses"]) {
    let r = await forcedCall(path, days, { 18: 100 });
    let a = argsOf(path, r);
    check(r.status === 200 && typeof a === "string" && /:\s*-?3{23,24}\s*}$/.test(a), `${path}: integer beyond 2^53 as generated`, { status: r.status, a, body: r.body.slice(0, 400) });
    r = await forcedCall(path, x, { 15: 100, 13: 90 });
    a = argsOf(path, r);
    check(r.status === 200 && typeof a === "string" && /:\s*-?0\.0{20,22}\s*}$/.test(a), `${path}: long decimal as generated`, { status: r.status, a, body: r.body.slice(0, 400) });
  }
}, 90000);

test("SIGTERM with a constrained request in flight and a hostile one sent: drains within --drain-timeout-s", async () => {
  const E = await startServer(["--drain-timeout-s", "2", "--max-tokens", "6000", "--ctx", "8192"]);
  try {
    const schema = { type: "object", properties: { items: { type: "array", items: { type: "string" } } }, required: ["items"] };
    const stream = await client(E).chat.completions.create({ model: MODEL_ID, messages: msgs, max_tokens: 6000, temperature: 0, stream: true, response_format: rf(schema) });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    const h = postJson(E, "/v1/chat/completions", { model: MODEL_ID, messages: msgs, max_tokens: 8, response_format: rf(attack) });
    await sleep(300);
    const t0 = Date.now();
    E.proc.kill("SIGTERM");
    try { for (;;) { const { done } = await it.next(); if (done) break; } } catch { /* cancelled at the drain timeout */ }
    const ex = await withTimeout(E.exit, 15000, "exit after SIGTERM");
    const hr = await h;
    check(ex.code === 0 && Date.now() - t0 < 2000 + 6000, "exit 0 within the drain timeout (+ grace)", { ex, ms: Date.now() - t0 });
    check(hr.status === 400, "the hostile schema was refused, not run", hr.status);
  } finally {
    await E.stop();
  }
}, 60000);

runSuite("e2e-grammar", {
  setup: async () => { A = await startServer(["--max-tokens", "256"]); return { A }; },
  teardown: async () => { const ex = await A.stop(); check(ex.code === 0, "server A exits 0", ex); },
  alive: () => running(A, "server A"),
});
