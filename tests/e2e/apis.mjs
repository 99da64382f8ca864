// End-to-end tests of the other APIs of `qvl serve` (issue 12), each driven by the real client that
// speaks it, sending its own request shape: the AI SDK's default OpenAI provider (Responses API) and
// its openai-compatible provider (streamed usage without include_usage), openai's responses.create
// and completions.create, LlamaIndex's OpenAI LLM with its own image part, the ollama npm client,
// CORS preflights (also with API keys), and a cross-origin fetch from a page in headless Chromium
// served on another loopback port. Prints "apis: N passed, N failed".
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";
import { OpenAI as LlamaOpenAI } from "@llamaindex/openai";
import { Ollama } from "ollama";
import { ChatOpenAI } from "@langchain/openai";
import {
  root, MODEL_ID, check, dataUrl, startServer, client, curl, postJson, errorOf, running, test, runSuite,
} from "./lib.mjs";

let A; // --cors-origin for the browser page's origin, no keys
let K; // --api-key k --cors-origin *
const KEY = "k-apis-test";
let pagePort = 0, pageServer = null;

const b64 = (name) => readFileSync(join(root, "tests/fixtures/images", name)).toString("base64");
const bytes = (name) => readFileSync(join(root, "tests/fixtures/images", name));

// ---- Responses API -----------------------------------------------------------------------------

test("openai responses.create: text, usage, output_text", async () => {
  const r = await client(A).responses.create({ model: MODEL_ID, input: "Say hi", max_output_tokens: 6, temperature: 0 });
  check(r.object === "response" && /^resp_/.test(r.id), "a response object", r);
  check(typeof r.output_text === "string" && r.output_text.length > 0, "output_text (the client's join of output parts)", r);
  check(r.output[0]?.type === "message" && r.output[0].content[0].type === "output_text", "output[0] is a message", r.output);
  check(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.output_tokens <= 6 &&
        r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, "usage", r.usage);
  check(r.status === "incomplete" ? r.incomplete_details?.reason === "max_output_tokens" : r.status === "completed",
        "status and incomplete_details agree", { status: r.status, d: r.incomplete_details });
  const g = await client(A).responses.create({ model: MODEL_ID, input: "Say hi", max_output_tokens: 6, temperature: 0 });
  check(g.output_text === r.output_text, "greedy is repeatable", [r.output_text, g.output_text]);
});

test("openai responses.create: stream event sequence", async () => {
  const s = await client(A).responses.create({ model: MODEL_ID, input: [{ role: "user", content: [{ type: "input_text", text: "Count" }] }],
    instructions: "Be brief.", max_output_tokens: 8, temperature: 0, stream: true });
  const types = [], seqs = [];
  let text = "", done = null, final = null;
  for await (const ev of s) {
    types.push(ev.type);
    seqs.push(ev.sequence_number);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.output_text.done") done = ev.text;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
  }
  const head = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
  const tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"];
  check(JSON.stringify(types.slice(0, 4)) === JSON.stringify(head), "opening events", types);
  check(types.slice(4, -4).every((t) => t === "response.output_text.delta") && types.length > 8, "deltas", types);
  check(JSON.stringify(types.slice(-4, -1)) === JSON.stringify(tail), "closing events", types);
  check(/^response\.(completed|incomplete)$/.test(types.at(-1)), "last event", types.at(-1));
  check(seqs.every((n, i) => n === i), "sequence_number counts from 0", seqs);
  check(done === text && final?.output?.[0]?.content?.[0]?.text === text, "done text = the deltas", { text, done });
  check(final?.usage?.output_tokens > 0 && final.instructions === "Be brief.", "final response: usage, instructions", final);
  const plain = await client(A).responses.create({ model: MODEL_ID, input: [{ role: "user", content: [{ type: "input_text", text: "Count" }] }],
    instructions: "Be brief.", max_output_tokens: 8, temperature: 0 });
  check(plain.output_text === text, "streamed = not streamed", [plain.output_text, text]);
});

test("openai responses.create: previous_response_id continues and reuses the KV", async () => {
  const c = client(A);
  const r1 = await c.responses.create({ model: MODEL_ID, input: "Remember the word apple.", max_output_tokens: 8, temperature: 0 });
  const r2 = await c.responses.create({ model: MODEL_ID, previous_response_id: r1.id, input: "Which word?", max_output_tokens: 8, temperature: 0 });
  check(r2.previous_response_id === r1.id, "previous_response_id echoed", r2.previous_response_id);
  check(r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens, "the earlier turn is in the prompt", [r1.usage, r2.usage]);
  check(r2.usage.input_tokens_details.cached_tokens > 0, "prefix cache reused the conversation's KV", r2.usage);
  // the same conversation sent in full gives the same answer
  const full = await c.responses.create({ model: MODEL_ID, max_output_tokens: 8, temperature: 0, input: [
    { role: "user", content: "Remember the word apple." },
    { role: "assistant", content: [{ type: "output_text", text: r1.output_text }] },
    { role: "user", content: "Which word?" }] });
  check(full.output_text === r2.output_text, "stored conversation = the conversation sent in full", [full.output_text, r2.output_text]);
  let err = null;
  try { await c.responses.create({ model: MODEL_ID, previous_response_id: "resp_nonexistent", input: "x" }); } catch (e) { err = e; }
  check(err?.status === 404 && err?.code === "previous_response_not_found", "unknown previous_response_id -> 404", err?.message);
  const r3 = await c.responses.create({ model: MODEL_ID, input: "x", max_output_tokens: 2, store: false });
  err = null;
  try { await c.responses.create({ model: MODEL_ID, previous_response_id: r3.id, input: "y" }); } catch (e) { err = e; }
  check(r3.store === false && err?.status === 404, "store:false is not kept", err?.message);
});

test("openai responses.create: input_image (data URL) and refused features", async () => {
  const c = client(A);
  const withImg = await c.responses.create({ model: MODEL_ID, max_output_tokens: 4, temperature: 0, input: [{ role: "user", content: [
    { type: "input_image", image_url: dataUrl("rgb_64x64.png"), detail: "auto" }, { type: "input_text", text: "What is this?" }] }] });
  const noImg = await c.responses.create({ model: MODEL_ID, max_output_tokens: 4, temperature: 0, input: "What is this?" });
  check(withImg.usage.input_tokens > noImg.usage.input_tokens + 4, "the image's tokens are in the prompt", [withImg.usage, noImg.usage]);
  const refused = async (body, param) => {
    let err = null;
    try { await c.responses.create({ model: MODEL_ID, input: "x", ...body }); } catch (e) { err = e; }
    check(err?.status === 400 && err?.param === param && err.message.includes(param.replace(/\[.*/, "")), `400 naming ${param}`, err?.message);
  };
  await refused({ tools: [{ type: "web_search" }] }, "tools[0]");
  await refused({ tools: [{ type: "file_search", vector_store_ids: ["vs_1"] }] }, "tools[0]");
  await refused({ background: true }, "background");
  await refused({ input: [{ role: "user", content: [{ type: "input_image", file_id: "file-abc" }] }] }, "input[0].content[0]");
  await refused({ reasoning: { effort: "low" } }, "reasoning");
  const bad = await postJson(A, "/v1/responses", { input: [{ role: "user", content: [{ type: "input_image", image_url: "file:///etc/passwd" }] }] });
  check(bad.status === 400, "a local file URL -> 400", bad);
  const notAllowed = await postJson(A, "/v1/responses", { input: [{ role: "user", content: [{ type: "input_image", image_url: "http://127.0.0.1:1/x.png" }] }] });
  check(notAllowed.status === 400 && /allow/i.test(errorOf(notAllowed)?.message ?? ""), "a URL not allow-listed -> 400", notAllowed.body);
});

test("AI SDK @ai-sdk/openai default provider (Responses): generateText, streamText, image", async () => {
  const openai = createOpenAI({ baseURL: A.base + "/v1", apiKey: "none" });
  const model = openai(MODEL_ID);
  const g = await generateText({ model, prompt: "Say hi", maxOutputTokens: 6, temperature: 0, maxRetries: 0 });
  check(typeof g.text === "string" && g.text.length > 0, "generateText text", g.text);
  check(g.usage.inputTokens > 0 && g.usage.outputTokens > 0, "generateText usage", g.usage);
  check(["stop", "length"].includes(g.finishReason), "finishReason", g.finishReason);
  check(/^resp_/.test(g.response.id), "it used the Responses API", g.response.id);
  const s = streamText({ model, prompt: "Say hi", maxOutputTokens: 6, temperature: 0, maxRetries: 0 });
  let text = "";
  for await (const t of s.textStream) text += t;
  const u = await s.usage;
  check(text === g.text, "streamText = generateText (greedy)", [text, g.text]);
  check(u.outputTokens > 0 && u.inputTokens > 0, "streamText usage", u);
  const img = await generateText({ model, maxOutputTokens: 4, temperature: 0, maxRetries: 0, messages: [{ role: "user", content: [
    { type: "image", image: bytes("rgb_64x64.png"), mediaType: "image/png" }, { type: "text", text: "What is this?" }] }] });
  check(img.usage.inputTokens > g.usage.inputTokens + 4, "image input counted", [img.usage, g.usage]);
});

test("LangChain ChatOpenAI with useResponsesApi: invoke, stream", async () => {
  const m = new ChatOpenAI({ model: MODEL_ID, apiKey: "none", configuration: { baseURL: A.base + "/v1" }, useResponsesApi: true,
    maxTokens: 5, temperature: 0, maxRetries: 0 });
  const r = await m.invoke("Say hi");
  const text = typeof r.content === "string" ? r.content : r.content.map((p) => p.text ?? "").join("");
  check(text.length > 0 && r.usage_metadata?.output_tokens > 0, "invoke: text and usage", { content: r.content, u: r.usage_metadata });
  let streamed = "";
  for await (const ch of await m.stream("Say hi"))
    streamed += typeof ch.content === "string" ? ch.content : ch.content.map((p) => p.text ?? "").join("");
  check(streamed === text, "streamed = invoked (greedy)", [streamed, text]);
});

test("AI SDK @ai-sdk/openai-compatible: streamed usage without include_usage", async () => {
  const p = createOpenAICompatible({ name: "qvl", baseURL: A.base + "/v1", apiKey: "none" });
  const s = streamText({ model: p.chatModel(MODEL_ID), prompt: "Say hi", maxOutputTokens: 6, temperature: 0, maxRetries: 0 });
  let text = "";
  for await (const t of s.textStream) text += t;
  const u = await s.usage;
  check(text.length > 0, "text", text);
  check(u.outputTokens > 0 && u.outputTokens <= 6 && u.inputTokens > 0, "usage arrives (--stream-usage default)", u);
  const g = await generateText({ model: p.chatModel(MODEL_ID), prompt: "Say hi", maxOutputTokens: 6, temperature: 0, maxRetries: 0 });
  check(g.text === text, "streamed = not streamed", [g.text, text]);
});

test("--stream-usage=false keeps OpenAI's strict framing", async () => {
  const s = await startServer(["--stream-usage=false"]);
  try {
    const st = await client(s).chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "hi" }], max_tokens: 3, stream: true });
    let withUsage = 0;
    for await (const ch of st) if (ch.usage) withUsage++;
    check(withUsage === 0, "no usage unless asked", withUsage);
  } finally { await s.stop(); }
});

// ---- legacy completions ------------------------------------------------------------------------

test("openai completions.create: plain, stream, echo, token ids, refused fields", async () => {
  const c = client(A);
  const r = await c.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 6, temperature: 0 });
  check(r.object === "text_completion" && typeof r.choices[0].text === "string" && r.choices[0].text.length > 0, "text_completion", r);
  check(r.usage.prompt_tokens > 0 && r.usage.prompt_tokens < 10, "no chat template around the prompt", r.usage);
  check(["length", "stop"].includes(r.choices[0].finish_reason), "finish_reason", r.choices[0]);
  const s = await c.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null;
  for await (const ch of s) {
    if (ch.choices[0]) text += ch.choices[0].text;
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    if (ch.usage) usage = ch.usage;
  }
  check(text === r.choices[0].text && finish === r.choices[0].finish_reason, "streamed = not streamed", [text, r.choices[0].text]);
  check(usage?.completion_tokens === r.usage.completion_tokens, "usage chunk", usage);
  const e = await c.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 6, temperature: 0, echo: true });
  check(e.choices[0].text === "Once upon a time" + r.choices[0].text, "echo puts the prompt first", e.choices[0].text);
  const ids = await c.completions.create({ model: MODEL_ID, prompt: [[9, 100, 2000]], max_tokens: 4, temperature: 0 });
  check(ids.usage.prompt_tokens === 3, "a token-id prompt is taken as is", ids.usage);
  const defaults = await c.completions.create({ model: MODEL_ID, prompt: "a", temperature: 0, stop: null });
  check(defaults.usage.completion_tokens <= 16, "max_tokens defaults to 16", defaults.usage);
  for (const [body, param] of [[{ suffix: "end" }, "suffix"], [{ prompt: ["a", "b"] }, "prompt"], [{ logprobs: 2 }, "logprobs"], [{ best_of: 3 }, "best_of"]]) {
    const x = await postJson(A, "/v1/completions", { prompt: "a", ...body });
    check(x.status === 400 && errorOf(x)?.param === param, `400 naming ${param}`, x.body);
  }
  const big = await postJson(A, "/v1/completions", { prompt: [999999999] });
  check(big.status === 400 && /vocabulary/.test(errorOf(big)?.message), "token id outside the vocabulary -> 400", big.body);
});

// ---- chat extras ---------------------------------------------------------------------------------

test("LlamaIndex OpenAI LLM with its own image part (file + file_data)", async () => {
  const llm = new LlamaOpenAI({ model: MODEL_ID, apiKey: "none", baseURL: A.base + "/v1", maxTokens: 4, temperature: 0, maxRetries: 0 });
  const text = await llm.chat({ messages: [{ role: "user", content: "What is this?" }] });
  const img = await llm.chat({ messages: [{ role: "user", content: [
    { type: "text", text: "What is this?" }, { type: "image", data: b64("rgb_64x64.png"), mimeType: "image/png" }] }] });
  check(typeof img.message.content === "string", "an answer", img.message);
  check(img.raw?.usage?.prompt_tokens > text.raw?.usage?.prompt_tokens + 4, "the image reached the model", [img.raw?.usage, text.raw?.usage]);
  const pdf = await postJson(A, "/v1/chat/completions", { messages: [{ role: "user", content: [{ type: "file", file: { file_data: "data:application/pdf;base64,AAAA" } }] }] });
  check(pdf.status === 400 && errorOf(pdf)?.param === "messages[0].content[0]", "a PDF file part -> 400", pdf.body);
});

test("chat: logit_bias steers greedy decoding; unhonoured fields -> 400", async () => {
  const base = { model: MODEL_ID, messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0 };
  const r = await client(A).chat.completions.create({ ...base, logit_bias: { 15: 100 } }); // id 15 is "0"
  check(r.choices[0].message.content === "0000", "+100 forces the token", r.choices[0].message.content);
  const banned = await client(A).chat.completions.create({ ...base, logit_bias: { 15: -100, 16: 99 } }); // "0" banned, "1" favoured
  check(banned.choices[0].message.content === "1111", "-100 bans the token", banned.choices[0].message.content);
  const plain = await client(A).chat.completions.create(base);
  check(plain.choices[0].message.content !== "0000", "without the bias the answer differs", plain.choices[0].message.content);
  for (const [field, val] of [["reasoning_effort", "low"], ["audio", { voice: "alloy", format: "mp3" }], ["modalities", ["text", "audio"]], ["prediction", { type: "content", content: "x" }]]) {
    const x = await postJson(A, "/v1/chat/completions", { ...base, [field]: val });
    check(x.status === 400 && errorOf(x)?.param === field, `400 naming ${field}`, x.body);
  }
  const lb = await postJson(A, "/v1/chat/completions", { ...base, logit_bias: { abc: 1 } });
  check(lb.status === 400 && errorOf(lb)?.param === "logit_bias", "bad logit_bias key -> 400", lb.body);
});

// ---- Ollama ----------------------------------------------------------------------------------------

test("ollama npm client: chat with an image, streaming, generate, list, show, ps, version", async () => {
  const o = new Ollama({ host: A.base });
  const text = await o.chat({ model: "qvl", messages: [{ role: "user", content: "What is this?" }], stream: false, options: { num_predict: 4, temperature: 0 } });
  const img = await o.chat({ model: MODEL_ID, messages: [{ role: "user", content: "What is this?", images: [b64("rgb_64x64.png")] }],
    stream: false, options: { num_predict: 4, temperature: 0 }, keep_alive: "5m" });
  check(img.done === true && typeof img.message.content === "string" && img.message.role === "assistant", "chat answer", img);
  check(img.prompt_eval_count > text.prompt_eval_count + 4 && img.eval_count > 0, "the image reached the model", [img.prompt_eval_count, text.prompt_eval_count]);
  check(["stop", "length"].includes(img.done_reason) && img.total_duration > 0, "done_reason, durations", img);
  const bin = await o.chat({ model: MODEL_ID, messages: [{ role: "user", content: "What is this?", images: [bytes("photo_96x60.jpg")] }],
    stream: false, options: { num_predict: 2 } });
  check(bin.prompt_eval_count > text.prompt_eval_count, "a JPEG given as bytes", bin.prompt_eval_count);
  const st = await o.chat({ model: MODEL_ID, messages: [{ role: "user", content: "What is this?" }], stream: true, options: { num_predict: 4, temperature: 0 } });
  let streamed = "", last = null, parts = 0;
  for await (const p of st) { streamed += p.message.content; last = p; parts++; }
  check(parts >= 2 && last.done === true && last.eval_count > 0, "NDJSON stream ends with done", last);
  check(streamed === text.message.content, "streamed = not streamed", [streamed, text.message.content]);
  const g = await o.generate({ model: MODEL_ID, prompt: "Once upon a time", stream: false, options: { num_predict: 3 } });
  check(typeof g.response === "string" && g.done && g.eval_count > 0, "generate", g);
  const raw = await o.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, stream: false, options: { num_predict: 3 } });
  check(raw.prompt_eval_count < g.prompt_eval_count, "raw: no template", [raw.prompt_eval_count, g.prompt_eval_count]);
  const load = await o.generate({ model: MODEL_ID, prompt: "", stream: false });
  check(load.done && load.done_reason === "load", "empty prompt loads the model", load);
  const list = await o.list();
  check(list.models.length === 1 && list.models[0].name === MODEL_ID, "list", list);
  const show = await o.show({ model: MODEL_ID });
  check(show.capabilities?.includes("vision") && show.details?.family, "show", show);
  const ps = await o.ps();
  check(ps.models[0]?.name === MODEL_ID, "ps", ps);
  const v = await o.version();
  check(/^\d+\.\d+\.\d+$/.test(v.version), "version", v);
  let err = null;
  try { await o.pull({ model: "llama3" }); } catch (e) { err = e; }
  check(err?.status_code === 501 && /not supported/.test(err.error ?? err.message), "pull -> 501 with a message", err);
  err = null;
  try { await o.show({ model: "llama3" }); } catch (e) { err = e; }
  check(err?.status_code === 404, "show of another model -> 404", err);
  err = null;
  try { await o.chat({ model: MODEL_ID, messages: [{ role: "user", content: "x" }], stream: false, options: { mirostat: 2 } }); } catch (e) { err = e; }
  check(err?.status_code === 400 && /mirostat/.test(err.error ?? err.message), "an option qvl lacks -> 400", err);
  err = null;
  try { await o.embed({ model: MODEL_ID, input: "x" }); } catch (e) { err = e; }
  check(err?.status_code === 501, "embed -> 501", err);
  const del = await curl(["-X", "DELETE", A.base + "/api/delete", "-d", '{"model":"x"}']);
  check(del.status === 501 && JSON.parse(del.body).error, "delete -> 501", del);
});

test("ollama: format json is passed on to structured output", async () => {
  // num_predict bounds the run: an object on random weights may nest until the token cap
  const r = await postJson(A, "/api/chat", { model: MODEL_ID, messages: [{ role: "user", content: "x" }], stream: false, format: "json",
    options: { num_predict: 48, seed: 1, temperature: 1 } });
  const body = JSON.parse(r.body);
  check(r.status === 200 && body.message.content.startsWith("{"), "json format: the answer is an object's beginning", r.body);
  let parsed = null;
  try { parsed = JSON.parse(body.message.content); } catch {}
  check(body.done_reason === "length" || (parsed && typeof parsed === "object" && !Array.isArray(parsed)), "a complete answer is an object", r.body);
});

// ---- CORS ------------------------------------------------------------------------------------------

test("CORS: preflight answered before the key check; headers on errors and streams", async () => {
  const pre = await curl(["-X", "OPTIONS", K.base + "/v1/chat/completions", "-H", "Origin: https://app.example.com",
    "-H", "Access-Control-Request-Method: POST", "-H", "Access-Control-Request-Headers: authorization, content-type, x-stainless-os"]);
  check(pre.status === 204, "preflight 204 without a key", pre);
  check(/access-control-allow-origin: \*/i.test(pre.headers) && /access-control-allow-methods: [^\r]*POST/i.test(pre.headers) &&
        /access-control-allow-headers: authorization, content-type, x-stainless-os/i.test(pre.headers), "preflight headers", pre.headers);
  const noKey = await postJson(K, "/v1/chat/completions", { messages: [{ role: "user", content: "x" }] }, ["-H", "Origin: https://app.example.com"]);
  check(noKey.status === 401 && /access-control-allow-origin: \*/i.test(noKey.headers), "a 401 carries the CORS header (the page can read it)", noKey.headers);
  const st = await postJson(K, "/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 2, stream: true },
    ["-H", "Origin: https://app.example.com", "-H", `Authorization: Bearer ${KEY}`]);
  check(st.status === 200 && /text\/event-stream/.test(st.headers) && /access-control-allow-origin: \*/i.test(st.headers), "stream with CORS", st.headers);
  const oll = await curl(["-X", "OPTIONS", K.base + "/api/chat", "-H", "Origin: http://x.test", "-H", "Access-Control-Request-Method: POST"]);
  check(oll.status === 204, "preflight of the Ollama API", oll.status);
  const other = await curl(["-X", "OPTIONS", A.base + "/v1/chat/completions", "-H", "Origin: https://evil.example", "-H", "Access-Control-Request-Method: POST"]);
  check(other.status === 405 && !/access-control-allow-origin/i.test(other.headers), "another origin gets no CORS headers", other);
  const get = await curl(["-H", "Origin: https://evil.example", A.base + "/v1/models"]);
  check(get.status === 200 && !/access-control/i.test(get.headers), "no CORS headers for an origin not listed", get.headers);
});

test("CORS: a page on another port calls the API from headless Chromium", async () => {
  const pw = await loadPlaywright();
  const browser = await pw.chromium.launch({ executablePath: process.env.QVL_CHROMIUM || "/usr/bin/chromium", headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${pagePort}/`);
    const out = await page.evaluate(async ({ base, model }) => {
      const res = {};
      const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json", Authorization: "Bearer none" },
        body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 3 }) });
      res.status = r.status;
      res.json = await r.json();
      const s = await fetch(base + "/v1/responses", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model, input: "hi", max_output_tokens: 3, stream: true }) });
      res.streamText = await s.text();
      const o = await fetch(base + "/api/chat", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], options: { num_predict: 2 } }) });
      res.ndjson = await o.text();
      return res;
    }, { base: A.base, model: MODEL_ID });
    check(out.status === 200 && out.json.choices?.[0]?.message, "cross-origin chat completion from the page", out);
    check(/event: response\.completed|event: response\.incomplete/.test(out.streamText), "cross-origin Responses stream", out.streamText?.slice(-300));
    check(out.ndjson.trim().split("\n").map((l) => JSON.parse(l)).at(-1).done === true, "cross-origin Ollama stream", out.ndjson);
    // a server that does not list the page's origin: the browser blocks the call
    const page2 = await browser.newPage();
    await page2.goto(`http://127.0.0.1:${pagePort}/`);
    const S = await startServer(["--cors-origin", "https://only.example"]);
    try {
      const res = await page2.evaluate(async (base) => {
        try { await fetch(base + "/v1/models"); return "allowed"; } catch (e) { return "blocked"; }
      }, S.base);
      check(res === "blocked", "an origin not listed is blocked by the browser", res);
    } finally { await S.stop(); }
  } finally { await browser.close(); }
}, 120000);

// playwright-core is a dependency of the browser tests; install their locked packages if missing.
async function loadPlaywright() {
  const dir = join(root, "tests/browser");
  const entry = join(dir, "node_modules/playwright-core/index.mjs");
  if (!existsSync(entry)) execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: dir, stdio: "inherit" });
  return import(pathToFileURL(entry).href);
}

// ---- runner ------------------------------------------------------------------------------------

runSuite("apis", {
  async setup() {
    pageServer = createServer((req, res) => { res.writeHead(200, { "Content-Type": "text/html" }); res.end("<!doctype html><title>other origin</title>"); });
    await new Promise((r) => pageServer.listen(0, "127.0.0.1", r));
    pagePort = pageServer.address().port;
    A = await startServer(["--cors-origin", `http://127.0.0.1:${pagePort}`, "--cors-origin", "https://app.example.com", "--ctx", "4096"]);
    K = await startServer(["--api-key", KEY, "--cors-origin", "*"]);
    return { A, K };
  },
  alive: ({ A, K }) => [running(A, "server A"), running(K, "server K")].find((x) => x !== true) ?? true,
  async teardown({ A, K }) {
    for (const s of [A, K]) {
      const ex = await s.stop();
      check(ex.code === 0, "server exits 0 on SIGTERM", ex);
      if (process.env.QVL_E2E_LOG) console.error(s.log().slice(-4000));
    }
    pageServer.close();
  },
});
