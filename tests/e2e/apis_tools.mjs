// End-to-end tests of tool calls and logprobs on the other APIs (Responses, Ollama) through the real
// pinned clients: openai's responses.create and its stream helper (responses.stream), the AI SDK's
// default provider (Responses) running a two-step tool loop, and the ollama npm client (chat with
// tools, streamed and not). The random e2e model never picks a tool by itself, so the requests force
// one (tool_choice required / named; on Ollama qvl's tool_choice extension): the output is then
// constrained to the tool's schema and the tests check that the arguments validate (zod), that the
// shapes are what the clients parse, that streamed calls equal non-streamed ones, and that the tool
// result sent back continues the conversation. Prints "apis_tools: N passed, N failed".
import { z } from "zod";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { Ollama } from "ollama";
import { MODEL_ID, check, startServer, client, postJson, errorOf, test, runServerSuite } from "./lib.mjs";

let A;

// The weather tool: its JSON schema (what the server constrains to) and the same as zod (what the
// tests validate with, independently of the server).
const WEATHER_PARAMS = {
  type: "object",
  properties: { city: { type: "string", maxLength: 10 }, unit: { enum: ["c", "f"] }, days: { type: "integer" } },
  required: ["city", "unit", "days"], additionalProperties: false,
};
const Weather = z.object({ city: z.string().max(10), unit: z.enum(["c", "f"]), days: z.number().int() }).strict();
const TIME_PARAMS = { type: "object", properties: { tz: { type: "string", maxLength: 5 } }, required: ["tz"], additionalProperties: false };
const Time = z.object({ tz: z.string().max(5) }).strict();
const RESP_TOOLS = [
  { type: "function", name: "get_weather", description: "Weather for a city", parameters: WEATHER_PARAMS, strict: true },
  { type: "function", name: "get_time", parameters: TIME_PARAMS, strict: true },
];
const ZOD = { get_weather: Weather, get_time: Time };

function argsValid(name, json) {
  try { return ZOD[name]?.safeParse(JSON.parse(json)).success === true; } catch { return false; }
}

// ---- Responses API ---------------------------------------------------------------------------------

test("openai responses.create: forced tool calls are function_call items with valid arguments", async () => {
  let calls = 0;
  for (let seed = 1; seed <= 4; seed++) {
    for (const tool_choice of ["required", { type: "function", name: "get_time" }]) {
      const what = `seed ${seed} ${JSON.stringify(tool_choice)}`;
      const r = await client(A).responses.create({ model: MODEL_ID, input: "weather in Paris?", tools: RESP_TOOLS, tool_choice,
        parallel_tool_calls: false, seed, temperature: 1, max_output_tokens: 300 });
      if (r.status === "incomplete") continue; // cut by max_output_tokens: nothing to validate
      calls++;
      const fc = r.output.filter((o) => o.type === "function_call");
      check(r.status === "completed" && fc.length === 1 && r.output.every((o) => o.type === "function_call"),
        `${what}: one function_call item and no message`, r.output);
      const c = fc[0];
      if (!c) continue;
      check(/^fc_/.test(c.id) && /^call_/.test(c.call_id) && c.status === "completed", `${what}: id, call_id, status`, c);
      check(typeof tool_choice === "string" ? ZOD[c.name] !== undefined : c.name === "get_time", `${what}: a known (the named) tool`, c);
      check(argsValid(c.name, c.arguments), `${what}: arguments validate against the tool's schema`, c.arguments);
      check(r.output_text === "" && r.tool_choice !== undefined, `${what}: no output text`, r.output_text);
    }
  }
  check(calls >= 5, `most calls complete (${calls}/8)`);
}, 240000);

test("openai responses.stream: function_call events; streamed = not streamed", async () => {
  let completed = 0;
  for (let seed = 1; seed <= 3; seed++) {
    const req = { model: MODEL_ID, input: "time?", tools: RESP_TOOLS, tool_choice: { type: "function", name: "get_weather" },
      seed, temperature: 1, max_output_tokens: 300 };
    const plain = await client(A).responses.create(req);
    if (plain.status !== "completed") continue; // cut by max_output_tokens: nothing to compare
    completed++;
    const stream = client(A).responses.stream(req);
    const types = [];
    let args = "", doneArgs = null, added = null, itemDone = null;
    for await (const ev of stream) {
      types.push(ev.type);
      // a copy: the helper's snapshot is built from these objects and grows the arguments in place
      if (ev.type === "response.output_item.added" && ev.item.type === "function_call") added = structuredClone(ev);
      if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
      if (ev.type === "response.function_call_arguments.done") doneArgs = ev.arguments;
      if (ev.type === "response.output_item.done" && ev.item.type === "function_call") itemDone = ev.item;
    }
    const final = await stream.finalResponse();
    const what = `seed ${seed}`;
    check(types[0] === "response.created" && types.at(-1) === "response.completed" && !types.includes("response.output_text.delta"),
      `${what}: created ... completed, no text deltas`, types);
    check(added?.output_index === 0 && added.item.status === "in_progress" && added.item.name === "get_weather" && added.item.arguments === "",
      `${what}: output_item.added with the call in progress`, added);
    check(args.length > 0 && args === doneArgs && itemDone?.arguments === args && itemDone.status === "completed",
      `${what}: deltas add up to .done and the finished item`, { args, doneArgs, itemDone });
    const fc = final.output.find((o) => o.type === "function_call");
    check(fc?.arguments === args && fc.call_id === added?.item.call_id, `${what}: the helper's final response carries the call`, final.output);
    const pc = plain.output.find((o) => o.type === "function_call");
    check(pc && pc.name === fc?.name && pc.arguments === fc?.arguments, `${what}: streamed call = non-streamed call`, { pc, fc });
    check(argsValid("get_weather", args), `${what}: streamed arguments validate`, args);
  }
  check(completed >= 2, `streamed calls compared (${completed}/3)`);
}, 180000);

test("openai responses: tool result sent back, with previous_response_id and in full", async () => {
  const c = client(A);
  const base = { model: MODEL_ID, tools: RESP_TOOLS, temperature: 0, max_output_tokens: 8 };
  let r1 = null;
  for (let seed = 1; seed <= 4 && !r1; seed++) {
    const r = await c.responses.create({ ...base, input: "weather?", tool_choice: "required", parallel_tool_calls: false, seed, temperature: 1, max_output_tokens: 300 });
    if (r.status === "completed") r1 = r;
  }
  check(r1 !== null, "a completed first turn");
  if (!r1) return;
  const call = r1.output.find((o) => o.type === "function_call");
  const output = JSON.stringify({ temp: 21, unit: "c" });
  const r2 = await c.responses.create({ ...base, previous_response_id: r1.id, input: [{ type: "function_call_output", call_id: call.call_id, output }] });
  check(r2.status !== "failed" && r2.output[0]?.type === "message" && typeof r2.output_text === "string", "turn 2: a message answer", r2.output);
  // (the constrained output's tokens are not the ones its text re-tokenizes to, so the prompt is
  // compared with itself: a longer tool result makes a longer prompt)
  check(r2.usage.input_tokens > r1.usage.input_tokens + 10, "turn 2: the call and its result follow turn 1", [r1.usage, r2.usage]);
  const longer = await c.responses.create({ ...base, previous_response_id: r1.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: output + " and a longer result of the tool" }] });
  check(longer.usage.input_tokens > r2.usage.input_tokens, "turn 2: the tool result is in the prompt", [longer.usage, r2.usage]);
  check(r2.usage.input_tokens_details.cached_tokens > 0, "turn 2: the prefix cache reused turn 1", r2.usage);
  // the same conversation sent in full (the function_call item the client got, then its output)
  const full = await c.responses.create({ ...base, store: false, input: [{ role: "user", content: "weather?" }, call,
    { type: "function_call_output", call_id: call.call_id, output }] });
  check(full.usage.input_tokens === r2.usage.input_tokens && full.output_text === r2.output_text,
    "stored conversation = the conversation sent in full", [full.usage, r2.usage, full.output_text, r2.output_text]);
  // an item_reference to the call (what the AI SDK sends when store is on)
  const ref = await c.responses.create({ ...base, store: false, input: [{ role: "user", content: "weather?" }, { type: "item_reference", id: call.id },
    { type: "function_call_output", call_id: call.call_id, output }] });
  check(ref.usage.input_tokens === r2.usage.input_tokens && ref.output_text === r2.output_text, "item_reference to the call = the call", [ref.usage, r2.usage]);
  // malformed tool input: 400 with a clear message
  const refused = async (body, param, part) => {
    const x = await postJson(A, "/v1/responses", { model: MODEL_ID, ...body });
    check(x.status === 400 && errorOf(x)?.param === param && errorOf(x)?.message.includes(part), `400 naming ${param} (${part})`, x.body);
  };
  await refused({ input: [{ type: "function_call_output", call_id: "call_unknown", output: "1" }] }, "input[0]", "call_unknown");
  await refused({ input: [{ type: "function_call", call_id: "c1", name: "get_time", arguments: "{not json" }] }, "input[0]", "JSON object");
  await refused({ input: [{ type: "function_call", call_id: "c1", name: "get_time", arguments: "{}" }, { type: "function_call_output", call_id: "c1", output: 5 }] }, "input[1]", "output");
  await refused({ input: "x", tools: [{ type: "function", function: { name: "get_time" } }] }, "tools[0].name", "flat");
  await refused({ input: "x", tools: RESP_TOOLS, tool_choice: { type: "function", name: "nope" } }, "tool_choice", "nope");
  await refused({ input: "x", include: ["file_search_call.results"] }, "include", "file_search_call.results");
}, 180000);

test("AI SDK (Responses provider): a two-step tool loop runs the tool and answers", async () => {
  const bodies = []; // what the provider sends: the second step refers to the stored call
  const openai = createOpenAI({ baseURL: A.base + "/v1", apiKey: "none", fetch: (url, init) => { bodies.push(JSON.parse(init.body)); return fetch(url, init); } });
  let ran = 0;
  for (let seed = 1; seed <= 3; seed++) {
    const executed = [];
    bodies.length = 0;
    const r = await generateText({
      model: openai(MODEL_ID), prompt: "weather?", seed, temperature: 1, maxOutputTokens: 300, maxRetries: 0,
      tools: { get_weather: tool({ description: "Weather for a city", inputSchema: Weather, execute: async (input) => { executed.push(input); return { temp: 20 }; } }) },
      toolChoice: "required", stopWhen: stepCountIs(2),
      prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "none", maxOutputTokens: 6 } : {}),
    });
    const first = r.steps[0];
    if (first?.finishReason === "length") continue;
    ran++;
    const tc = first?.toolCalls?.[0];
    check(tc?.toolName === "get_weather" && Weather.safeParse(tc.input).success, `seed ${seed}: a typed tool call`, first?.toolCalls);
    check(executed.length === first.toolCalls.length && first.toolResults?.every((t) => t.output?.temp === 20), `seed ${seed}: the tool ran for each call`, first?.toolResults);
    check(r.steps.length === 2 && r.steps[1].toolCalls.length === 0 && /^resp_/.test(r.steps[1].response.id),
      `seed ${seed}: the second step answers after the result`, r.steps.map((s) => s.finishReason));
    const refs = bodies[1]?.input?.filter((i) => i.type === "item_reference").map((i) => i.id) ?? [];
    check(refs.length === first.toolCalls.length && refs.every((id) => /^fc_/.test(id)) && bodies[1].input.some((i) => i.type === "function_call_output"),
      `seed ${seed}: the second request refers to the stored calls (item_reference) and sends the results`, bodies[1]?.input);
    check(r.steps[1].usage.inputTokens > first.usage.inputTokens, `seed ${seed}: the call and result are in the second prompt`, [first.usage, r.steps[1].usage]);
  }
  check(ran >= 2, `tool loops (${ran}/3)`);
}, 180000);

test("openai responses: output_text logprobs (include / top_logprobs) = the chat's", async () => {
  const c = client(A);
  const req = { model: MODEL_ID, input: "count", max_output_tokens: 10, temperature: 0, include: ["message.output_text.logprobs"], top_logprobs: 3 };
  const r = await c.responses.create(req);
  const lp = r.output[0].content[0].logprobs;
  check(Array.isArray(lp) && lp.length === r.usage.output_tokens, "one entry per generated token", { n: lp?.length, u: r.usage });
  check(lp.every((t) => typeof t.token === "string" && Array.isArray(t.bytes) && t.top_logprobs.length === 3 && t.top_logprobs[0].logprob === t.logprob),
    "greedy: token, bytes, three alternatives, the chosen one first", lp.slice(0, 2));
  const chat = await c.chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "count" }], max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 3 });
  check(JSON.stringify(lp) === JSON.stringify(chat.choices[0].logprobs.content), "the same entries as the chat endpoint's", { r: lp.length, c: chat.choices[0].logprobs.content.length });
  let done = null;
  for await (const ev of c.responses.stream(req)) if (ev.type === "response.output_text.done") done = ev.logprobs;
  check(JSON.stringify(done) === JSON.stringify(lp), "streamed: output_text.done carries them", done?.length);
  const only = await c.responses.create({ ...req, include: undefined });
  check(only.output[0].content[0].logprobs.length === lp.length, "top_logprobs alone also asks for them", only.output[0].content[0].logprobs.length);
  const none = await c.responses.create({ ...req, include: undefined, top_logprobs: undefined });
  check(JSON.stringify(none.output[0].content[0].logprobs) === "[]", "not asked: []", none.output[0].content[0].logprobs);
});

// ---- Ollama --------------------------------------------------------------------------------------

const OLLAMA_TOOLS = [{ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: WEATHER_PARAMS } }];

test("ollama client: chat with tools, not streamed and streamed; the tool result continues", async () => {
  const o = new Ollama({ host: A.base });
  let done = 0;
  for (let seed = 1; seed <= 3; seed++) {
    const req = { model: MODEL_ID, messages: [{ role: "user", content: "weather in Rome?" }], tools: OLLAMA_TOOLS, tool_choice: "required",
      options: { seed, temperature: 1, num_predict: 300 } };
    const r = await o.chat({ ...req, stream: false });
    if (r.done_reason === "length") continue;
    done++;
    const what = `seed ${seed}`;
    const tc = r.message.tool_calls;
    check(r.done && r.done_reason === "stop" && tc?.length >= 1 && r.message.content === "", `${what}: message.tool_calls, done_reason stop`, r);
    if (!tc?.length) continue;
    check(tc.every((c) => c.function.name === "get_weather" && typeof c.function.arguments === "object" && Weather.safeParse(c.function.arguments).success),
      `${what}: arguments are objects that validate`, tc);
    check(tc.every((c, i) => c.function.index === i), `${what}: function.index`, tc);
    const st = await o.chat({ ...req, stream: true });
    const streamed = [];
    let last = null, text = "";
    for await (const p of st) {
      text += p.message.content;
      if (p.message.tool_calls) { streamed.push(...p.message.tool_calls); check(p.done === false, `${what}: the calls come before the done line`); }
      last = p;
    }
    check(last?.done === true && last.done_reason === "stop" && text === "", `${what}: the stream ends with done`, last);
    check(JSON.stringify(streamed.map((c) => c.function)) === JSON.stringify(tc.map((c) => c.function)), `${what}: streamed calls = non-streamed`, { streamed, tc });
    // the tool result goes back as Ollama clients send it: the assistant message, then role "tool"
    const turn = (result, call = r.message) => o.chat({ model: MODEL_ID, stream: false, tools: OLLAMA_TOOLS, options: { num_predict: 6, temperature: 0 },
      messages: [...req.messages, call, { role: "tool", content: JSON.stringify(result), tool_name: "get_weather" }] });
    const next = await turn({ temp: 21 });
    check(next.done && next.message.role === "assistant" && next.prompt_eval_count > r.prompt_eval_count + 10,
      `${what}: the next turn answers after the call and its result`, [next.prompt_eval_count, r.prompt_eval_count]);
    const longer = await turn({ temp: 21, note: "a longer result of the tool" });
    const bigger = await turn({ temp: 21 }, { ...r.message, tool_calls: [{ function: { ...tc[0].function, arguments: { ...tc[0].function.arguments, city: tc[0].function.arguments.city + " and a longer name" } } }, ...tc.slice(1)] });
    check(longer.prompt_eval_count > next.prompt_eval_count && bigger.prompt_eval_count > next.prompt_eval_count,
      `${what}: the tool result and the call's arguments are in the prompt`, [next.prompt_eval_count, longer.prompt_eval_count, bigger.prompt_eval_count]);
  }
  check(done >= 2, `calls complete (${done}/3)`);
  // tools offered but not forced: the random model answers text, no tool_calls
  const auto = await o.chat({ model: MODEL_ID, messages: [{ role: "user", content: "hi" }], tools: OLLAMA_TOOLS, stream: false, options: { num_predict: 8, temperature: 0 } });
  check(auto.done && typeof auto.message.content === "string" && !auto.message.tool_calls, "auto: a text answer", auto.message);
  // malformed tool input: 400 with the message
  const refused = async (messages, part) => {
    let err = null;
    try { await o.chat({ model: MODEL_ID, messages, stream: false }); } catch (e) { err = e; }
    check(err?.status_code === 400 && (err.error ?? err.message).includes(part), `400: ${part}`, err?.message);
  };
  const u = { role: "user", content: "x" };
  await refused([u, { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: "{\"city\":\"x\"}" } }] }], "JSON object");
  await refused([u, { role: "assistant", content: "", tool_calls: [{ function: { arguments: {} } }] }], "name");
  await refused([u, { role: "assistant", content: "", tool_calls: { function: { name: "f" } } }], "array");
  await refused([u, { role: "tool", content: "1", tool_name: 5 }], "tool_name");
  const gen = await postJson(A, "/api/generate", { model: MODEL_ID, prompt: "x", tools: OLLAMA_TOOLS });
  check(gen.status === 400 && /\/api\/chat/.test(JSON.parse(gen.body).error), "generate with tools -> 400 pointing to /api/chat", gen.body);
}, 240000);

runServerSuite("apis_tools", ["--ctx", "4096"], { started: (s) => (A = s) });
