// End-to-end tests of Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through
// the real pinned @anthropic-ai/sdk client: text and images (base64 and an allow-listed URL) with the
// answer checked against the chat completion of the same conversation, the SDK's stream helpers
// (text events, finalMessage) against the non-streamed answer, the raw event sequence, stop_sequences,
// a forced tool call validated against its schema and sent back as a tool_result, count_tokens
// against the usage of an answer, x-api-key and Bearer auth, and the SDK's error classes (529 from a
// full server included).
// Prints "messages: N passed, N failed".
import Anthropic from "@anthropic-ai/sdk";
import { z } from "zod";
import { MODEL_ID, check, client, dataUrl, fixtureImageHost, postJson, startServer, test, runServerSuite } from "./lib.mjs";

const KEY = "k-anthropic";
let A;
const ant = (opts = {}) => new Anthropic({ baseURL: A.base, apiKey: KEY, maxRetries: 0, timeout: 120000, ...opts });
const oai = () => client(A, KEY);

// a small image host for url sources (allow-listed with --allow-image-url)
const host = await fixtureImageHost();
const HOST = host.base;

const b64 = (name) => dataUrl(name).split(",")[1];
const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

const WEATHER_SCHEMA = {
  type: "object",
  properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] }, days: { type: "integer" } },
  required: ["city", "unit", "days"], additionalProperties: false,
};
const Weather = z.object({ city: z.string().max(10), unit: z.enum(["c", "f"]), days: z.number().int() }).strict();
const TOOLS = [{ name: "get_weather", description: "Weather for a city", input_schema: WEATHER_SCHEMA }];

test("messages.create: a text answer as the chat completion of the same conversation gives", async () => {
  const m = await ant().messages.create({ model: MODEL_ID, max_tokens: 8, temperature: 0, system: "Be brief.",
    messages: [{ role: "user", content: "Name a color." }], metadata: { user_id: "u-1" } });
  check(m.type === "message" && m.role === "assistant" && /^msg_/.test(m.id) && m.model === MODEL_ID, "message shape", m);
  check(m.content.length === 1 && m.content[0].type === "text", "one text block", m.content);
  check(["end_turn", "max_tokens"].includes(m.stop_reason) && m.stop_sequence === null, "stop_reason", m);
  check(m.usage.input_tokens > 0 && m.usage.output_tokens > 0 && m.usage.output_tokens <= 8 &&
    m.usage.cache_read_input_tokens >= 0, "usage", m.usage);
  const c = await oai().chat.completions.create({ model: MODEL_ID, max_tokens: 8, temperature: 0,
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Name a color." }] });
  check(textOf(m) === c.choices[0].message.content, "same text as the chat", [textOf(m), c.choices[0].message.content]);
  check(m.usage.input_tokens + m.usage.cache_read_input_tokens === c.usage.prompt_tokens, "same prompt tokens",
    [m.usage, c.usage]);
  check((m.stop_reason === "max_tokens") === (c.choices[0].finish_reason === "length"), "max_tokens <-> length");
});

test("messages.create: images as base64 and as an allow-listed URL", async () => {
  const ask = (source) => ant().messages.create({ model: MODEL_ID, max_tokens: 8, temperature: 0,
    messages: [{ role: "user", content: [{ type: "image", source }, { type: "text", text: "What is this?" }] }] });
  const viaB64 = await ask({ type: "base64", media_type: "image/png", data: b64("rgb_64x64.png") });
  const viaUrl = await ask({ type: "url", url: `${HOST}/rgb_64x64.png` });
  check(textOf(viaB64) === textOf(viaUrl), "the fetched image gives the base64 answer", [textOf(viaB64), textOf(viaUrl)]);
  const c = await oai().chat.completions.create({ model: MODEL_ID, max_tokens: 8, temperature: 0, messages: [{ role: "user",
    content: [{ type: "image_url", image_url: { url: dataUrl("rgb_64x64.png") } }, { type: "text", text: "What is this?" }] }] });
  check(textOf(viaB64) === c.choices[0].message.content, "same as the chat's answer", [textOf(viaB64), c.choices[0].message.content]);
  const plain = await ant().messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: "user", content: "What is this?" }] });
  const total = (u) => u.input_tokens + u.cache_read_input_tokens;
  check(total(viaB64.usage) > total(plain.usage) + 4, "the image's tokens count", [viaB64.usage, plain.usage]);
  try {
    await ant().messages.create({ model: MODEL_ID, max_tokens: 4, messages: [{ role: "user", content: [
      { type: "image", source: { type: "url", url: "http://127.0.0.1:1/elsewhere.png" } }] }] });
    check(false, "a URL off the allow list is refused");
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && e.error?.error?.type === "invalid_request_error", "off-list URL: BadRequestError", String(e));
  }
});

test("messages.stream: text events and finalMessage equal the non-streamed answer", async () => {
  const req = { model: MODEL_ID, max_tokens: 12, temperature: 0, messages: [{ role: "user", content: "Tell me a story." }] };
  const whole = await ant().messages.create(req);
  let streamed = "";
  const s = ant().messages.stream(req);
  s.on("text", (t) => { streamed += t; });
  const fin = await s.finalMessage();
  check(streamed === textOf(whole) && textOf(fin) === textOf(whole), "the same text", [streamed, textOf(fin), textOf(whole)]);
  check(fin.stop_reason === whole.stop_reason && fin.id !== whole.id && /^msg_/.test(fin.id), "stop_reason, own id", [fin.stop_reason, whole.stop_reason]);
  check(fin.usage.output_tokens === whole.usage.output_tokens &&
    fin.usage.input_tokens + fin.usage.cache_read_input_tokens === whole.usage.input_tokens + whole.usage.cache_read_input_tokens,
    "usage from message_delta", [fin.usage, whole.usage]);
  // the raw events, in Anthropic's order (the SDK's iterator skips pings: read the wire for those)
  const raw = await ant().messages.create({ ...req, stream: true });
  const types = [];
  for await (const ev of raw) types.push(ev.type);
  const squashed = types.filter((t, i) => !(t === "content_block_delta" && types[i - 1] === "content_block_delta"));
  check(JSON.stringify(squashed) === JSON.stringify(["message_start", "content_block_start", "content_block_delta",
    "content_block_stop", "message_delta", "message_stop"]), "event sequence", types);
  const wire = await postJson(A, "/v1/messages", { ...req, stream: true }, ["-H", `x-api-key: ${KEY}`]);
  const events = [...wire.body.matchAll(/^event: (\w+)$/gm)].map((x) => x[1]);
  check(events[2] === "ping" && events.filter((t) => t === "ping").length === 1 && /text\/event-stream/.test(wire.headers),
    "one ping after the first content_block_start", events);
});

test("stop_sequences: the answer ends before the sequence, stop_reason stop_sequence", async () => {
  const base = { model: MODEL_ID, max_tokens: 16, temperature: 0, messages: [{ role: "user", content: "Count." }] };
  const free = textOf(await ant().messages.create(base));
  const chars = [...free];
  const stop = chars.slice(3).find((ch) => ch.trim() && !chars.slice(0, 3).includes(ch));
  if (!check(stop !== undefined, "the free answer has a character to stop at", free)) return;
  for (const stream of [false, true]) {
    const req = { ...base, stop_sequences: ["zzqqxxnever", stop] };
    const m = stream ? await ant().messages.stream(req).finalMessage() : await ant().messages.create(req);
    check(m.stop_reason === "stop_sequence" && m.stop_sequence === stop, `stream=${stream}: stop_sequence reported`, m);
    check(textOf(m) === free.slice(0, free.indexOf(stop)), `stream=${stream}: text up to it`, [textOf(m), free, stop]);
  }
});

test("tools: a forced tool_use validates, streams the same, and its tool_result continues the conversation", async () => {
  let done = 0;
  for (let seed = 1; seed <= 3; seed++) {
    for (const tool_choice of [{ type: "any" }, { type: "tool", name: "get_weather" }]) {
      const what = `seed ${seed} ${tool_choice.type}`;
      const req = { model: MODEL_ID, max_tokens: 120, temperature: 1, top_k: 40, seed, tools: TOOLS, tool_choice,
        messages: [{ role: "user", content: "Weather in Paris?" }] };
      const m = await ant().messages.create(req);
      if (m.stop_reason === "max_tokens") continue; // cut short: nothing to validate
      done++;
      const uses = m.content.filter((b) => b.type === "tool_use");
      check(m.stop_reason === "tool_use" && uses.length >= 1, `${what}: stop_reason tool_use`, m);
      const u = uses[0];
      if (!u) continue;
      check(/^toolu_/.test(u.id) && u.name === "get_weather" && Weather.safeParse(u.input).success, `${what}: valid input`, u);
      const s = await ant().messages.stream(req).finalMessage();
      const su = s.content.find((b) => b.type === "tool_use");
      check(su && JSON.stringify(su.input) === JSON.stringify(u.input) && s.stop_reason === "tool_use",
        `${what}: the stream's input_json_delta pieces give the same input`, [su, u]);
      const next = await ant().messages.create({ model: MODEL_ID, max_tokens: 6, temperature: 0, tools: TOOLS,
        messages: [{ role: "user", content: "Weather in Paris?" }, { role: "assistant", content: m.content },
          { role: "user", content: [{ type: "tool_result", tool_use_id: u.id, content: "18 C, sunny" }] }] });
      check(next.type === "message" && next.usage.input_tokens + next.usage.cache_read_input_tokens > m.usage.input_tokens,
        `${what}: the tool_result turn is answered`, next);
    }
  }
  check(done >= 3, `most forced calls complete (${done}/6)`);
  try {
    await ant().messages.create({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: [
      { type: "tool_result", tool_use_id: "toolu_unknown", content: "x" }] }] });
    check(false, "a tool_result without its tool_use is refused");
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && /tool_use_id/.test(e.message), "unknown tool_use_id: BadRequestError", String(e));
  }
}, 240000);

test("tool_use.input is the model's JSON as written: an integer beyond 2^53 and a long decimal, streamed and not", async () => {
  // logit_bias (a qvl extension here) forces the digits: "3" is token 18, "0" 15, "." 13 in the Qwen vocabulary
  const call = (schema, bias, stream = false) => postJson(A, "/v1/messages", { model: MODEL_ID, max_tokens: 80, temperature: 0, stream,
    logit_bias: bias, tools: [{ name: "f", input_schema: schema }], tool_choice: { type: "tool", name: "f" },
    messages: [{ role: "user", content: "x" }] }, ["-H", `x-api-key: ${KEY}`]);
  const days = { type: "object", properties: { days: { type: "integer" } }, required: ["days"], additionalProperties: false };
  const x = { type: "object", properties: { x: { type: "number" } }, required: ["x"], additionalProperties: false };
  for (const [schema, bias, re, what] of [[days, { 18: 100 }, /"input":\{"days":-?3{23,24}\}/, "integer"], [x, { 15: 100, 13: 90 }, /"input":\{"x":-?0\.0{20,22}\}/, "decimal"]]) {
    const r = await call(schema, bias);
    check(r.status === 200 && re.test(r.body), `${what}: input as generated`, r.body.slice(0, 400));
    const s = await call(schema, bias, true);
    const partial = [...s.body.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1])).filter((e) => e.delta?.type === "input_json_delta")
      .map((e) => e.delta.partial_json).join("");
    check(re.test(`"input":${partial}`), `${what}: the stream's partial_json pieces spell the same`, partial);
  }
});

test("count_tokens: the prompt's tokens, images included, as an answer's usage counts them", async () => {
  const messages = [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png",
    data: b64("rgb_128x64.png") } }, { type: "text", text: "Describe." }] }];
  const n = await ant().messages.countTokens({ model: MODEL_ID, system: "Be brief.", messages });
  const m = await ant().messages.create({ model: MODEL_ID, max_tokens: 1, system: "Be brief.", messages });
  check(n.input_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens, "count = usage", [n, m.usage]);
  const t = await ant().messages.countTokens({ model: MODEL_ID, messages: [{ role: "user", content: "Describe." }] });
  check(t.input_tokens > 0 && t.input_tokens < n.input_tokens, "without the image: fewer", [t, n]);
  const r = await postJson(A, "/v1/messages/count_tokens", { model: MODEL_ID, messages: [] }, ["-H", `x-api-key: ${KEY}`]);
  check(r.status === 400 && JSON.parse(r.body).type === "error", "a bad count request: 400 in Anthropic's shape", r);
});

test("auth and errors: x-api-key or Bearer, and the SDK's error classes", async () => {
  const bearer = await ant({ apiKey: null, authToken: KEY }).messages.create({ model: MODEL_ID, max_tokens: 2,
    messages: [{ role: "user", content: "hi" }] });
  check(bearer.type === "message", "Authorization: Bearer works too");
  const cases = [
    ["a wrong key", () => ant({ apiKey: "wrong" }).messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: "user", content: "hi" }] }),
      Anthropic.AuthenticationError, 401, "authentication_error"],
    ["an unknown model", () => ant().messages.create({ model: "claude-none", max_tokens: 2, messages: [{ role: "user", content: "hi" }] }),
      Anthropic.NotFoundError, 404, "not_found_error"],
    ["no max_tokens", () => ant().messages.create({ model: MODEL_ID, messages: [{ role: "user", content: "hi" }] }),
      Anthropic.BadRequestError, 400, "invalid_request_error"],
    ["a system role in messages", () => ant().messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: "system", content: "hi" }] }),
      Anthropic.BadRequestError, 400, "invalid_request_error"],
    ["a server tool", () => ant().messages.create({ model: MODEL_ID, max_tokens: 2, tools: [{ type: "web_search_20250305", name: "web_search" }],
      messages: [{ role: "user", content: "hi" }] }), Anthropic.BadRequestError, 400, "invalid_request_error"],
    ["a body over max_body_mb", () => ant().messages.create({ model: MODEL_ID, max_tokens: 2, messages: [{ role: "user",
      content: "x".repeat(3 << 20) }] }), Anthropic.APIError, 413, "request_too_large"],
  ];
  for (const [what, call, cls, status, type] of cases) {
    try {
      await call();
      check(false, `${what}: refused`);
    } catch (e) {
      check(e instanceof cls && e.status === status && e.error?.type === "error" && e.error?.error?.type === type &&
        typeof e.error?.error?.message === "string", `${what}: ${cls.name} ${status} ${type}`, [e.constructor.name, e.status, e.error]);
    }
  }
  const r = await postJson(A, "/v1/messages/batches", {}, ["-H", `x-api-key: ${KEY}`]);
  check(r.status === 404 && JSON.parse(r.body).error.type === "not_found_error", "an unknown messages endpoint: 404 not_found_error", r);
  // the model does not reason: thinking enabled is refused naming it, disabled is what it does anyway
  try {
    await ant().messages.create({ model: MODEL_ID, max_tokens: 64, thinking: { type: "enabled", budget_tokens: 16 },
      messages: [{ role: "user", content: "hi" }] });
    check(false, "thinking enabled: refused");
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && e.error?.error?.type === "invalid_request_error" &&
      /thinking/.test(e.error?.error?.message), "thinking enabled on a model that does not reason: 400 naming thinking", [e.status, e.error]);
  }
  const thinking = await ant().messages.create({ model: MODEL_ID, max_tokens: 8, thinking: { type: "disabled" },
    messages: [{ role: "user", content: "hi" }] });
  check(thinking.content.every((b) => b.type === "text"), "thinking disabled is accepted (no thinking blocks)", thinking.content);
});

test("a full server: 529 overloaded_error (the SDK's InternalServerError) with Retry-After", async () => {
  const B = await startServer(["--max-batch-size", "1", "--queue", "0", "--ctx", "8192", "--max-tokens", "6000"]);
  try {
    const sdk = new Anthropic({ baseURL: B.base, apiKey: "none", maxRetries: 0, timeout: 120000 });
    const long = sdk.messages.stream({ model: MODEL_ID, max_tokens: 6000, temperature: 1, messages: [{ role: "user", content: "Go on." }] });
    long.on("error", () => {}).on("abort", () => {});
    const ended = long.done().catch(() => {}); // aborted below: that rejection is expected
    await new Promise((res) => long.once("text", res)); // running: the one slot is taken
    const r = await postJson(B, "/v1/messages", { model: MODEL_ID, max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
    check(r.status === 529 && JSON.parse(r.body).error?.type === "overloaded_error" && /Retry-After: 2/i.test(r.headers),
      "529 overloaded_error + Retry-After", r);
    try {
      await sdk.messages.create({ model: MODEL_ID, max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
      check(false, "refused while full");
    } catch (e) {
      check(e instanceof Anthropic.InternalServerError && e.status === 529 && e.error?.error?.type === "overloaded_error",
        "the SDK raises InternalServerError 529", [e.constructor.name, e.status]);
    }
    long.abort();
    await ended;
  } finally {
    await B.stop();
  }
});

runServerSuite("messages", ["--api-key", KEY, "--allow-image-url", `${HOST}/`, "--max-body-mb", "2"], {
  started: (s) => { A = s; },
  after: () => host.close(),
});
