// End-to-end tests of the smaller fields of the other APIs through the real pinned clients: Ollama's
// logprobs / top_logprobs (the ollama npm client, chat and generate, streamed and not, against the
// chat endpoint's own logprobs) and the Responses API's max_tool_calls (openai's responses.create).
// Prints "apis_extras: N passed, N failed".
import { Ollama } from "ollama";
import { MODEL_ID, check, client, postJson, test, runServerSuite } from "./lib.mjs";

let A;

const strip = (t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes });

test("ollama client: logprobs and top_logprobs are the chat's, streamed and not", async () => {
  const o = new Ollama({ host: A.base });
  const req = { model: MODEL_ID, messages: [{ role: "user", content: "count" }], logprobs: true, top_logprobs: 3,
    options: { temperature: 0, num_predict: 10 } };
  const r = await o.chat({ ...req, stream: false });
  const chat = await client(A).chat.completions.create({ model: MODEL_ID, messages: req.messages, max_tokens: 10, temperature: 0,
    logprobs: true, top_logprobs: 3 });
  const want = chat.choices[0].logprobs.content;
  check(Array.isArray(r.logprobs) && r.logprobs.length === want.length && r.logprobs.length === r.eval_count, "one entry per token",
    [r.logprobs?.length, want.length, r.eval_count]);
  check(r.logprobs.every((t) => typeof t.token === "string" && typeof t.logprob === "number" && t.logprob <= 0 &&
    t.top_logprobs.length === 3 && t.top_logprobs[0].logprob === t.logprob), "Ollama's Logprob shape with 3 alternatives", r.logprobs[0]);
  check(JSON.stringify(r.logprobs.map(strip)) === JSON.stringify(want.map(strip)), "the chat endpoint's entries", [r.logprobs[0], want[0]]);
  check(r.logprobs.map((t) => t.token).join("") === r.message.content, "the tokens spell the answer");
  const streamed = [];
  let text = "";
  for await (const p of await o.chat({ ...req, stream: true })) {
    text += p.message.content;
    if (p.logprobs) streamed.push(...p.logprobs);
  }
  check(text === r.message.content && JSON.stringify(streamed) === JSON.stringify(r.logprobs), "the stream's logprobs add up to the same",
    [streamed.length, r.logprobs.length]);
  const g = await o.generate({ model: MODEL_ID, prompt: "count", logprobs: true, options: { temperature: 0, num_predict: 6 }, stream: false });
  check(g.logprobs?.length === g.eval_count && g.logprobs.every((t) => t.top_logprobs === undefined), "generate: logprobs, no alternatives unasked",
    g.logprobs?.[0]);
  const none = await o.chat({ ...req, logprobs: false, stream: false });
  check(none.logprobs === undefined, "not asked: no logprobs field", Object.keys(none));
  const bad = await postJson(A, "/api/chat", { ...req, top_logprobs: 21, stream: false });
  check(bad.status === 400 && /top_logprobs/.test(JSON.parse(bad.body).error), "top_logprobs 21 -> 400", bad.body);
});

const TIME = { type: "function", name: "get_time", parameters: { type: "object", properties: { tz: { type: "string", maxLength: 5 } },
  required: ["tz"], additionalProperties: false }, strict: true };

test("openai responses: max_tool_calls caps the function_call items and is echoed", async () => {
  const c = client(A);
  const base = { model: MODEL_ID, input: "time in Paris?", tools: [TIME], tool_choice: "required", temperature: 1, max_output_tokens: 200 };
  let seen = 0;
  for (let seed = 1; seed <= 3; seed++) {
    const one = await c.responses.create({ ...base, seed, max_tool_calls: 1 });
    check(one.max_tool_calls === 1, `seed ${seed}: echoed`, one.max_tool_calls);
    const calls = one.output.filter((o) => o.type === "function_call");
    check(calls.length <= 1, `seed ${seed}: at most one call`, one.output);
    seen += calls.length;
    const zero = await c.responses.create({ ...base, seed, max_tool_calls: 0, max_output_tokens: 8 });
    check(zero.output.every((o) => o.type !== "function_call") && zero.max_tool_calls === 0, `seed ${seed}: 0 -> no calls`, zero.output);
  }
  check(seen >= 1, "the forced calls still come with max_tool_calls 1", seen);
  const r = await postJson(A, "/v1/responses", { ...base, max_tool_calls: -1 });
  check(r.status === 400 && JSON.parse(r.body).error.param === "max_tool_calls", "max_tool_calls -1 -> 400", r.body);
}, 120000);

runServerSuite("apis_extras", ["--ctx", "4096"], { started: (s) => (A = s) });
