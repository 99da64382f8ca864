// End-to-end tests of tools, constrained JSON output and logprobs (issue 11) against a real
// `qvl serve` with the random-weight e2e model, through the pinned clients: openai (tools,
// chat.completions.parse with a Zod schema), @langchain/openai (bindTools, withStructuredOutput),
// the AI SDK (generateObject, generateText with tools). The model answers gibberish, so the tests
// check protocol and validity: every constrained output parses and validates against its schema,
// over many seeds and schemas (nested, recursive); streamed tool calls reassemble to the
// non-streamed ones; logprobs are those of the sampled tokens. Prints "agents: N passed, N failed".
import { z } from "zod";
import { zodResponseFormat } from "openai/helpers/zod";
import { ChatOpenAI } from "@langchain/openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, tool } from "ai";
import { MODEL_ID, check, startServer, client, postJson, errorOf, userMsg, test, runServerSuite } from "./lib.mjs";

let A;

// ---- a validator for the schema subset, independent of the server ------------------------------

function resolveRef(doc, ref) {
  if (ref === "#") return doc;
  let cur = doc;
  for (const part of ref.replace(/^#\//, "").split("/")) cur = cur?.[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  return cur;
}
const codePoints = (s) => [...s].length;
function validate(doc, s, v, path = "$") {
  if (s === true || s === undefined) return null;
  if (s.$ref) return validate(doc, resolveRef(doc, s.$ref), v, path);
  if (s.anyOf) return s.anyOf.some((a) => validate(doc, a, v, path) === null) ? null : `${path}: no anyOf branch`;
  if (s.enum) return s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)) ? null : `${path}: not in enum`;
  if ("const" in s) return JSON.stringify(s.const) === JSON.stringify(v) ? null : `${path}: not the const`;
  const types = s.type === undefined ? null : [].concat(s.type);
  const typeOf = (x) => x === null ? "null" : Array.isArray(x) ? "array" : typeof x === "number" ? (Number.isInteger(x) ? "integer" : "number") : typeof x;
  if (types) {
    const t = typeOf(v);
    if (!types.includes(t) && !(t === "integer" && types.includes("number"))) return `${path}: ${t} is not ${types}`;
  }
  if (typeof v === "string") {
    if (s.maxLength !== undefined && codePoints(v) > s.maxLength) return `${path}: longer than ${s.maxLength}`;
    if (s.minLength !== undefined && codePoints(v) < s.minLength) return `${path}: shorter than ${s.minLength}`;
  }
  if (Array.isArray(v)) {
    if (s.maxItems !== undefined && v.length > s.maxItems) return `${path}: more than ${s.maxItems} items`;
    if (s.minItems !== undefined && v.length < s.minItems) return `${path}: fewer than ${s.minItems} items`;
    for (let i = 0; i < v.length; i++) {
      const e = validate(doc, s.items, v[i], `${path}[${i}]`);
      if (e) return e;
    }
  } else if (v && typeof v === "object") {
    for (const r of s.required || []) if (!(r in v)) return `${path}: missing ${r}`;
    for (const [k, x] of Object.entries(v)) {
      const ps = s.properties?.[k];
      if (!ps && s.additionalProperties === false) return `${path}: extra property ${k}`;
      const e = ps ? validate(doc, ps, x, `${path}.${k}`) : null;
      if (e) return e;
    }
  }
  return null;
}

// ---- schemas -------------------------------------------------------------------------------------

const str = (n = 8) => ({ type: "string", maxLength: n });
const obj = (properties, extra = {}) => ({ type: "object", properties, required: Object.keys(properties), additionalProperties: false, ...extra });
const SCHEMAS = {
  receipt: obj({
    merchant: str(),
    items: { type: "array", maxItems: 3, items: obj({ desc: str(), qty: { type: "integer" }, price: { type: "number" } }) },
    total: { type: "number" },
    currency: { enum: ["EUR", "USD", "GBP"] },
    paid: { type: "boolean" },
    note: { type: ["string", "null"], maxLength: 6 },
  }),
  nested: obj({ a: obj({ b: obj({ c: obj({ d: { type: "integer" }, e: { anyOf: [str(4), { type: "null" }, obj({ x: { const: 1 } })] } }) }) }) }),
  tree: {
    $defs: { node: obj({ v: { type: "integer" }, kids: { type: "array", maxItems: 2, items: { $ref: "#/$defs/node" } } }) },
    $ref: "#/$defs/node",
  },
  rows: obj({ rows: { type: "array", minItems: 1, maxItems: 4, items: obj({ name: str(6), score: { type: "number" }, tag: { enum: ["x", "y", 3, null] } }) } }),
};

async function constrained(schema, seed, extra = {}) {
  const r = await postJson(A, "/v1/chat/completions", {
    model: MODEL_ID, messages: [userMsg("Extract the data as JSON.")], max_tokens: 400, seed, temperature: 1,
    response_format: { type: "json_schema", json_schema: { name: "out", strict: true, schema } }, ...extra,
  });
  return { status: r.status, body: r.status === 200 ? JSON.parse(r.body) : errorOf(r) };
}

// ---- tests ---------------------------------------------------------------------------------------

test("json_schema: many seeds and schemas parse and validate", async () => {
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    let stopped = 0, bad = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const { status, body } = await constrained(schema, seed);
      check(status === 200, `${name} seed ${seed}: 200`, body);
      if (status !== 200) continue;
      const c = body.choices[0];
      if (c.finish_reason !== "stop") continue; // cut by max_tokens: nothing to validate
      stopped++;
      let v, err;
      try { v = JSON.parse(c.message.content); err = validate(schema, schema, v); } catch (e) { err = "does not parse: " + e.message; }
      if (err) bad++;
      check(!err, `${name} seed ${seed}: output validates`, { err, content: c.message.content });
    }
    check(stopped >= 4, `${name}: most outputs complete within max_tokens (${stopped}/6)`);
    check(bad === 0, `${name}: every complete output validates`);
  }
}, 240000);

test("json_schema: without the mask the same seed is not JSON (the mask is what makes it valid)", async () => {
  const r = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: [userMsg("Extract the data as JSON.")], max_tokens: 40, seed: 3, temperature: 1 });
  const content = JSON.parse(r.body).choices[0].message.content;
  let parsed = true;
  try { JSON.parse(content); } catch { parsed = false; }
  check(!parsed, "unconstrained output of the random model is not JSON", content);
});

test("json_object: outputs are JSON objects (complete ones parse)", async () => {
  // Any object may nest and grow without end on random weights, so most runs hit max_tokens:
  // those must still be an object's beginning; complete ones must parse as an object.
  for (let seed = 1; seed <= 4; seed++) {
    const r = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: [userMsg("JSON please")], max_tokens: 60, seed, temperature: 1, response_format: { type: "json_object" } });
    const c = JSON.parse(r.body).choices[0];
    check(c.message.content.startsWith("{"), `json_object seed ${seed}: starts an object`, c.message.content);
    if (c.finish_reason !== "stop") continue;
    let v = null;
    try { v = JSON.parse(c.message.content); } catch {}
    check(v && typeof v === "object" && !Array.isArray(v), `json_object seed ${seed}: an object`, c.message.content);
  }
});

test("json_schema: constrained requests in one batch equal their solo runs", async () => {
  const schema = SCHEMAS.receipt;
  const solo = [];
  for (let seed = 11; seed <= 14; seed++) solo.push((await constrained(schema, seed, { max_tokens: 60 })).body.choices[0].message.content);
  const together = await Promise.all([11, 12, 13, 14].map((seed) => constrained(schema, seed, { max_tokens: 60 })));
  together.forEach((t, i) => check(t.body.choices[0].message.content === solo[i], `seed ${11 + i}: batched = solo`, { solo: solo[i], batched: t.body.choices[0].message.content }));
});

test("unsupported schema keywords: 400 naming the keyword", async () => {
  for (const [kw, schema] of [["pattern", { type: "string", pattern: "^a" }], ["format", obj({ d: { type: "string", format: "date" } })],
                               ["minimum", obj({ n: { type: "number", minimum: 0 } })], ["oneOf", { oneOf: [{ type: "string" }] }]]) {
    const { status, body } = await constrained(schema, 1);
    check(status === 400 && body?.message.includes(kw) && body?.param === "response_format.json_schema.schema", `${kw}: 400 naming it`, body);
  }
  const r = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: [userMsg("x")], tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "string", pattern: "x" } } } } }], tool_choice: "required" });
  check(r.status === 400 && errorOf(r)?.message.includes("pattern"), "tool parameters: unsupported keyword with tool_choice required", r.body);
});

test("openai: chat.completions.parse with a Zod schema", async () => {
  const Receipt = z.object({
    merchant: z.string().max(8),
    total: z.number(),
    items: z.array(z.object({ name: z.string().max(6), qty: z.number().int() })).max(2),
    kind: z.enum(["food", "fuel"]),
    tip: z.number().nullable(),
  });
  let ok = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const r = await client(A).chat.completions.parse({ model: MODEL_ID, messages: [userMsg("Read the receipt")], seed, temperature: 1, max_tokens: 300, response_format: zodResponseFormat(Receipt, "receipt") });
    const c = r.choices[0];
    if (c.finish_reason !== "stop") continue;
    ok++;
    check(Receipt.safeParse(c.message.parsed).success, `seed ${seed}: parsed validates with zod`, c.message.content);
  }
  check(ok >= 4, `parse: most complete (${ok}/6)`);
}, 120000);

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: obj({ city: str(10), unit: { enum: ["c", "f"] }, days: { type: "integer" } }),
  },
};
const timeTool = { type: "function", function: { name: "get_time", parameters: obj({ tz: str(5) }) } };

test("openai: tools with tool_choice required / named; stream reassembles to the same calls", async () => {
  let complete = 0;
  for (let seed = 1; seed <= 5; seed++) {
    for (const tool_choice of ["required", { type: "function", function: { name: "get_time" } }]) {
      const req = { model: MODEL_ID, messages: [userMsg("weather in Paris?")], tools: [weatherTool, timeTool], tool_choice, seed, temperature: 1, max_tokens: 300, parallel_tool_calls: false };
      const r = await client(A).chat.completions.create(req);
      const c = r.choices[0];
      const what = `seed ${seed} ${JSON.stringify(tool_choice)}`;
      if (c.finish_reason === "length") continue;
      complete++;
      check(c.finish_reason === "tool_calls" && c.message.tool_calls?.length === 1, `${what}: one tool call`, c);
      const call = c.message.tool_calls?.[0];
      if (!call) continue;
      check(/^call_/.test(call.id) && call.type === "function", `${what}: id and type`, call);
      const t = [weatherTool, timeTool].find((x) => x.function.name === call.function.name);
      check(t && (typeof tool_choice === "string" || call.function.name === "get_time"), `${what}: a known (the named) tool`, call);
      let args, err;
      try { args = JSON.parse(call.function.arguments); err = validate(t.function.parameters, t.function.parameters, args); } catch (e) { err = e.message; }
      check(!err, `${what}: arguments validate against the parameters`, { err, call });
      // the same request streamed
      const stream = await client(A).chat.completions.create({ ...req, stream: true });
      const calls = [];
      let finish = null, sawId = false;
      for await (const ch of stream) {
        const d = ch.choices[0]?.delta;
        if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
        for (const tc of d?.tool_calls || []) {
          const slot = (calls[tc.index] ||= { name: "", arguments: "" });
          if (tc.id) { slot.id = tc.id; sawId = true; }
          if (tc.function?.name) slot.name += tc.function.name;
          if (tc.function?.arguments) slot.arguments += tc.function.arguments;
        }
      }
      check(finish === "tool_calls" && sawId, `${what}: stream ends with tool_calls, ids sent`, finish);
      check(calls.length === 1 && calls[0].name === call.function.name && JSON.stringify(JSON.parse(calls[0].arguments)) === JSON.stringify(args),
        `${what}: streamed call = non-streamed`, { calls, call });
    }
  }
  check(complete >= 6, `most forced calls complete within max_tokens (${complete}/10)`);
}, 240000);

test("tools: parallel calls, auto, none, tool results continue the conversation, legacy functions", async () => {
  let multi = 0, called = 0;
  for (let seed = 1; seed <= 6; seed++) {
    const r = await client(A).chat.completions.create({ model: MODEL_ID, messages: [userMsg("both")], tools: [weatherTool, timeTool], tool_choice: "required", seed, temperature: 1, max_tokens: 400 });
    const c = r.choices[0];
    if (c.finish_reason === "tool_calls") {
      called++;
      check(c.message.tool_calls.length >= 1, `parallel seed ${seed}: calls`);
      multi += c.message.tool_calls.length > 1;
      const ids = new Set(c.message.tool_calls.map((t) => t.id));
      check(ids.size === c.message.tool_calls.length, `parallel seed ${seed}: distinct ids`);
    }
  }
  check(called >= 4, `parallel: most forced answers are calls (${called}/6, ${multi} with several)`);
  const auto = await client(A).chat.completions.create({ model: MODEL_ID, messages: [userMsg("hi")], tools: [weatherTool], max_tokens: 16, seed: 1 });
  check(["stop", "length", "tool_calls"].includes(auto.choices[0].finish_reason), "auto: a normal answer", auto.choices[0]);
  const none = await client(A).chat.completions.create({ model: MODEL_ID, messages: [userMsg("hi")], tools: [weatherTool], tool_choice: "none", max_tokens: 16, seed: 1 });
  check(!none.choices[0].message.tool_calls && none.choices[0].finish_reason !== "tool_calls", "none: no tool calls");
  // a whole turn: call, result, answer
  const first = await client(A).chat.completions.create({ model: MODEL_ID, messages: [userMsg("weather?")], tools: [weatherTool], tool_choice: "required", seed: 2, temperature: 1, max_tokens: 300 });
  const m = first.choices[0].message;
  check(m.tool_calls?.length >= 1, "turn: a call", m);
  if (m.tool_calls?.length) {
    const next = await client(A).chat.completions.create({
      model: MODEL_ID, max_tokens: 12, seed: 3, tools: [weatherTool],
      messages: [userMsg("weather?"), m, ...m.tool_calls.map((t) => ({ role: "tool", tool_call_id: t.id, content: JSON.stringify({ temp: 21 }) }))],
    });
    check(next.choices[0].message.role === "assistant" && typeof next.usage.prompt_tokens === "number", "turn: the tool result continues the conversation");
  }
  const legacy = await postJson(A, "/v1/chat/completions", { model: MODEL_ID, messages: [userMsg("x")], functions: [timeTool.function], function_call: { name: "get_time" }, seed: 4, temperature: 1, max_tokens: 300 });
  const lc = JSON.parse(legacy.body).choices?.[0];
  check(legacy.status === 200 && (lc.finish_reason === "length" || lc.message.tool_calls?.[0]?.function.name === "get_time"), "legacy functions + function_call", legacy.body);
}, 240000);

const lcModel = () => new ChatOpenAI({ model: MODEL_ID, apiKey: "none", configuration: { baseURL: A.base + "/v1" }, maxRetries: 0, temperature: 1, maxTokens: 300 });

test("langchain: bindTools and withStructuredOutput", async () => {
  let ok = 0;
  for (let seed = 1; seed <= 4; seed++) {
    const m = lcModel().bindTools([weatherTool], { tool_choice: "any" });
    const msg = await m.invoke("weather in Rome?", { seed });
    if (msg.response_metadata?.finish_reason === "length") continue;
    ok++;
    const tc = msg.tool_calls?.[0];
    check(tc && tc.name === "get_weather" && !validate(weatherTool.function.parameters, weatherTool.function.parameters, tc.args), `bindTools seed ${seed}: a valid call`, msg.tool_calls);
  }
  check(ok >= 2, `bindTools: calls complete (${ok}/4)`);
  const Person = z.object({ name: z.string().max(8), age: z.number().int(), langs: z.array(z.enum(["en", "fr"])).max(2) });
  for (const method of ["jsonSchema", "functionCalling"]) {
    let done = 0;
    for (let seed = 1; seed <= 4; seed++) {
      try {
        const out = await lcModel().withStructuredOutput(Person, { method, strict: true }).invoke("Who is it?", { seed });
        done++;
        check(Person.safeParse(out).success, `withStructuredOutput ${method} seed ${seed}: validates`, out);
      } catch (e) {
        // only a max_tokens cut may fail to parse
        check(/length|parse|JSON/i.test(String(e.message)), `withStructuredOutput ${method} seed ${seed}: ${e.message}`);
      }
    }
    check(done >= 2, `withStructuredOutput ${method}: outputs (${done}/4)`);
  }
}, 240000);

test("AI SDK: generateObject and generateText with tools", async () => {
  const provider = createOpenAI({ baseURL: A.base + "/v1", apiKey: "none" });
  const Item = z.object({ title: z.string().max(8), price: z.number(), tags: z.array(z.enum(["a", "b"])).max(2), ok: z.boolean() });
  let done = 0;
  for (let seed = 1; seed <= 4; seed++) {
    try {
      const { object } = await generateObject({ model: provider.chat(MODEL_ID), schema: Item, prompt: "Extract", seed, temperature: 1, maxOutputTokens: 300, maxRetries: 0 });
      done++;
      check(Item.safeParse(object).success, `generateObject seed ${seed}: validates`, object);
    } catch (e) {
      check(/length|parse|JSON|schema/i.test(String(e.message)), `generateObject seed ${seed}: ${e.message}`);
    }
  }
  check(done >= 2, `generateObject: objects (${done}/4)`);
  let called = 0;
  for (let seed = 1; seed <= 3; seed++) {
    const r = await generateText({
      model: provider.chat(MODEL_ID), prompt: "weather?", seed, temperature: 1, maxOutputTokens: 300, maxRetries: 0, toolChoice: "required",
      tools: { get_weather: tool({ description: "weather", inputSchema: z.object({ city: z.string().max(10), days: z.number().int() }), execute: async ({ city }) => ({ city, temp: 20 }) }) },
    });
    if (r.finishReason === "length") continue;
    called++;
    const tc = r.toolCalls?.[0];
    check(tc?.toolName === "get_weather" && typeof tc.input?.city === "string" && Number.isInteger(tc.input?.days), `generateText seed ${seed}: a typed tool call`, r.toolCalls);
    check(r.toolResults?.[0]?.output?.temp === 20, `generateText seed ${seed}: the tool ran`, r.toolResults);
  }
  check(called >= 2, `generateText: tool calls (${called}/3)`);
}, 240000);

test("logprobs: greedy's chosen token is the top one; sampled logprob is the drawn one; stream = non-stream", async () => {
  const base = { model: MODEL_ID, messages: [userMsg("count")], max_tokens: 12, logprobs: true, top_logprobs: 5 };
  const g = await client(A).chat.completions.create({ ...base, temperature: 0 });
  const content = g.choices[0].logprobs.content;
  check(content.length === g.usage.completion_tokens || content.length === g.usage.completion_tokens - 0, "one entry per token", content.length);
  for (const [i, t] of content.entries()) {
    check(t.top_logprobs.length === 5 && t.top_logprobs[0].logprob === t.logprob && JSON.stringify(t.top_logprobs[0].bytes) === JSON.stringify(t.bytes), `greedy token ${i}: chosen = top`, t);
    check(t.top_logprobs.every((x, j) => j === 0 || x.logprob <= t.top_logprobs[j - 1].logprob) && t.logprob <= 0, `greedy token ${i}: ordered, <= 0`);
    check(t.top_logprobs.reduce((s, x) => s + Math.exp(x.logprob), 0) <= 1 + 1e-4, `greedy token ${i}: top mass <= 1`);
  }
  const text = Buffer.from(content.flatMap((t) => t.bytes)).toString("utf8");
  check(g.choices[0].finish_reason !== "length" || text === g.choices[0].message.content, "the tokens' bytes spell the content", { text, c: g.choices[0].message.content });
  // sampled: the chosen token's logprob is the one listed for it among the alternatives when present
  const s = await client(A).chat.completions.create({ ...base, temperature: 0.9, top_k: 0, seed: 7 });
  for (const t of s.choices[0].logprobs.content) {
    const same = t.top_logprobs.find((x) => JSON.stringify(x.bytes) === JSON.stringify(t.bytes));
    check(t.logprob > -9999 && t.logprob <= 0 && (!same || Math.abs(same.logprob - t.logprob) < 1e-6), "sampled: a finite logprob, consistent with the alternatives", t);
  }
  const st = await client(A).chat.completions.create({ ...base, temperature: 0.9, top_k: 0, seed: 7, stream: true });
  const got = [];
  for await (const ch of st) got.push(...(ch.choices[0]?.logprobs?.content || []));
  check(JSON.stringify(got) === JSON.stringify(s.choices[0].logprobs.content), "streamed logprobs = non-streamed", { got: got.length, want: s.choices[0].logprobs.content.length });
  // with a schema, the logprobs are those of the masked distribution: EOS and the tokens all allowed
  const c = await constrained(SCHEMAS.nested, 5, { logprobs: true, top_logprobs: 3, temperature: 0 });
  const lp = c.body.choices[0].logprobs.content;
  check(lp.every((t) => t.top_logprobs[0].logprob === t.logprob), "constrained greedy: chosen = top");
  const bad = await postJson(A, "/v1/chat/completions", { ...base, top_logprobs: 21 });
  check(bad.status === 400 && errorOf(bad)?.param === "top_logprobs", "top_logprobs 21: 400", bad.body);
}, 120000);

runServerSuite("agents", ["--ctx", "4096"], { started: (s) => (A = s) });
