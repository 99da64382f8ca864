// A reasoning model end to end: a tiny random GGUF whose tokenizer.chat_template is the real
// Qwen3-VL Thinking template (qvl make-random --chat-template), served with --reasoning-budget 4.
// Random weights never close the think block themselves; the budget closes it, and a +100
// logit_bias on one token makes the text exact: 4 reasoning tokens, the forced "\n</think>\n\n",
// then the answer. Checked through the openai client (chat, streaming, Responses and its events),
// the AI SDK (reasoning from reasoning_content), the ollama client (think, message.thinking), the
// budget fields, the Anthropic SDK (thinking blocks and their stream events), and /tokenize, /detokenize, /apply-template (the C renderer against Jinja2's
// rendering of the real template, tests/unit/chat_thinking_cases.json).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";
import { Ollama } from "ollama";
import Anthropic from "@anthropic-ai/sdk";
import { QVL, MODEL, root, check, startServer, client, postJson, errorOf, running, test, runSuite } from "./lib.mjs";

const dir = mkdtempSync(join(tmpdir(), "qvl-e2e-think-"));
const THINK = join(dir, "think.gguf");
const ID = "think.gguf";
let S; // the reasoning model, --reasoning-budget 4
let bias; // {id: 100} for " sky"
const WORD = " sky";

test("the model is made and detected from its template", async () => {
  const show = await postJson(S, "/api/show", { model: ID });
  check(JSON.parse(show.body).capabilities?.includes("thinking"), "ollama /api/show lists thinking", show.body);
});

test("chat: reasoning_content apart from content, the budget closes the block", async () => {
  const c = client(S);
  const r = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Why is the sky blue?" }],
    max_tokens: 12, temperature: 0, logit_bias: bias });
  const m = r.choices[0].message;
  check(m.reasoning_content === WORD.repeat(4), "4 reasoning tokens (the server's budget)", m);
  check(m.content === WORD.repeat(5), "then the answer: 12 - 4 - the close's 3 tokens", m);
  check(r.usage.completion_tokens === 12 && r.usage.completion_tokens_details?.reasoning_tokens === 6,
    "usage: 6 tokens inside the block (4 + \\n + </think>)", r.usage);
  const x = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Why?" }],
    max_tokens: 12, temperature: 0, logit_bias: bias, max_reasoning_tokens: 2 });
  check(x.choices[0].message.reasoning_content === WORD.repeat(2) && x.choices[0].message.content === WORD.repeat(7),
    "max_reasoning_tokens 2 overrides the server's 4", x.choices[0].message);
  for (const body of [{ reasoning_effort: "none" }, { chat_template_kwargs: { enable_thinking: false } }, { max_reasoning_tokens: 0 }]) {
    const n = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Why?" }],
      max_tokens: 5, temperature: 0, logit_bias: bias, ...body });
    check(n.choices[0].message.reasoning_content === undefined && n.choices[0].message.content === WORD.repeat(5) &&
      !n.usage.completion_tokens_details?.reasoning_tokens, `${JSON.stringify(body)}: no reasoning`, n.choices[0].message);
  }
  const low = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Why?" }],
    max_tokens: 8, temperature: 0, logit_bias: bias, reasoning_effort: "low" });
  check(low.choices[0].message.reasoning_content === WORD.repeat(8) && low.choices[0].message.content === "",
    "reasoning_effort low = 512 tokens: all 8 are reasoning", low.choices[0].message);
  for (const [body, param] of [[{ reasoning_effort: "extreme" }, "reasoning_effort"], [{ max_reasoning_tokens: -2 }, "max_reasoning_tokens"],
    [{ max_reasoning_tokens: "4" }, "max_reasoning_tokens"], [{ chat_template_kwargs: { enable_thinking: 1 } }, "chat_template_kwargs.enable_thinking"]]) {
    const b = await postJson(S, "/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 2, ...body });
    check(b.status === 400 && errorOf(b)?.param === param, `400 naming ${param}`, b.body);
  }
});

test("chat streaming: reasoning deltas first, then content, equal to the whole answer", async () => {
  const c = client(S);
  const s = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Why is the sky blue?" }],
    max_tokens: 12, temperature: 0, logit_bias: bias, stream: true });
  let reasoning = "", content = "", order = "";
  for await (const ch of s) {
    const d = ch.choices[0]?.delta ?? {};
    if (d.reasoning_content) { reasoning += d.reasoning_content; order += "r"; }
    if (d.content) { content += d.content; order += "c"; }
  }
  check(reasoning === WORD.repeat(4) && content === WORD.repeat(5), "streamed text", { reasoning, content });
  check(/^r+c+$/.test(order), "every reasoning delta before the first content delta", order);
});

test("AI SDK (openai-compatible): reasoning read from reasoning_content, streamed and not", async () => {
  const p = createOpenAICompatible({ name: "qvl", baseURL: S.base + "/v1", apiKey: "none" });
  const opts = { model: p.chatModel(ID), prompt: "Why is the sky blue?", maxOutputTokens: 12, temperature: 0, maxRetries: 0,
    providerOptions: { qvl: { logit_bias: bias } } };
  const g = await generateText(opts);
  check(g.reasoningText === WORD.repeat(4) && g.text === WORD.repeat(5), "generateText: reasoningText and text", [g.reasoningText, g.text]);
  const s = streamText(opts);
  let reasoning = "", text = "";
  for await (const part of s.fullStream) {
    if (part.type === "reasoning-delta") reasoning += part.text;
    if (part.type === "text-delta") text += part.text;
  }
  check(reasoning === WORD.repeat(4) && text === WORD.repeat(5), "streamText: reasoning-delta and text-delta parts", [reasoning, text]);
});

test("Responses: a reasoning item before the message, and its streaming events", async () => {
  const c = client(S);
  const r = await c.responses.create({ model: ID, input: "Why is the sky blue?", max_output_tokens: 12, temperature: 0,
    logit_bias: bias, reasoning: { effort: "high" }, max_reasoning_tokens: 3 });
  check(r.output[0]?.type === "reasoning" && r.output[0].content?.[0]?.type === "reasoning_text" &&
    r.output[0].content[0].text === WORD.repeat(3), "output[0] is the reasoning", r.output[0]);
  check(r.output[1]?.type === "message" && r.output_text === WORD.repeat(6), "output[1] the message", r.output[1]);
  check(r.reasoning?.effort === "high" && r.usage.output_tokens_details.reasoning_tokens === 5, "reasoning echoed, usage", [r.reasoning, r.usage]);
  const s = await c.responses.create({ model: ID, input: "Why is the sky blue?", max_output_tokens: 12, temperature: 0,
    logit_bias: bias, stream: true });
  let reasoning = "", text = "", done = null, msgAdded = null, seq = [];
  for await (const ev of s) {
    seq.push(ev.type);
    if (ev.type === "response.reasoning_text.delta") reasoning += ev.delta;
    if (ev.type === "response.reasoning_text.done") done = ev.text;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.output_item.added" && ev.item.type === "message") msgAdded = ev.output_index;
  }
  check(reasoning === WORD.repeat(4) && done === reasoning && text === WORD.repeat(5), "reasoning_text deltas, done, then text", { reasoning, done, text });
  check(msgAdded === 1 && seq.indexOf("response.reasoning_text.done") < seq.indexOf("response.output_text.delta"),
    "the message is output 1, after the reasoning", seq.join(" "));
  // an earlier output sent back, reasoning item included, is accepted
  const again = await c.responses.create({ model: ID, input: [{ role: "user", content: "Why?" }, ...r.output.map((o) => ({ ...o })),
    { role: "user", content: "And?" }], max_output_tokens: 2, temperature: 0 });
  check(again.status === "incomplete" || again.status === "completed", "input with a reasoning item", again.status);
});

test("Anthropic SDK: thinking budget_tokens, a thinking block first, thinking_delta and signature_delta", async () => {
  const a = new Anthropic({ baseURL: S.base, apiKey: "none", maxRetries: 0, timeout: 120000 });
  const ask = { model: ID, max_tokens: 12, temperature: 0, logit_bias: bias, messages: [{ role: "user", content: "Why is the sky blue?" }] };
  const r = await a.messages.create({ ...ask, thinking: { type: "enabled", budget_tokens: 3 } });
  check(r.content.length === 2 && r.content[0].type === "thinking" && r.content[0].thinking === WORD.repeat(3) &&
    r.content[0].signature === "", "content[0]: the thinking block, budget_tokens 3", r.content);
  check(r.content[1].type === "text" && r.content[1].text === WORD.repeat(6), "content[1]: the answer", r.content);
  check(r.usage.output_tokens === 12 && r.stop_reason === "max_tokens", "output_tokens counts the reasoning", r.usage);
  const off = await a.messages.create({ ...ask, max_tokens: 5, thinking: { type: "disabled" } });
  check(off.content.length === 1 && off.content[0].type === "text" && off.content[0].text === WORD.repeat(5), "disabled: no thinking", off.content);
  const s = a.messages.stream({ ...ask, thinking: { type: "enabled", budget_tokens: 4 } });
  let thinking = "", text = "", order = "", signature = null;
  s.on("thinking", (d) => { thinking += d; order += "t"; });
  s.on("text", (d) => { text += d; order += "x"; });
  s.on("streamEvent", (ev) => { if (ev.type === "content_block_delta" && ev.delta.type === "signature_delta") { signature = ev.delta.signature; order += "s"; } });
  const m = await s.finalMessage();
  check(m.content[0]?.type === "thinking" && m.content[0].thinking === WORD.repeat(4) && m.content[1]?.text === WORD.repeat(5),
    "finalMessage: the thinking block, then the text", m.content);
  check(thinking === WORD.repeat(4) && text === WORD.repeat(5) && /^t+sx+$/.test(order) && signature === "",
    "thinking deltas, the signature, then text", { thinking, text, order, signature });
  let bad = null;
  try { await a.messages.create({ ...ask, thinking: { type: "enabled", budget_tokens: 12 } }); } catch (e) { bad = e; }
  check(bad instanceof Anthropic.BadRequestError && /budget_tokens/.test(bad.error?.error?.message), "budget_tokens >= max_tokens: 400", bad?.error);
});

test("ollama client: think and message.thinking, streamed and not", async () => {
  const o = new Ollama({ host: S.base });
  const r = await o.chat({ model: ID, messages: [{ role: "user", content: "Why is the sky blue?" }], think: true,
    options: { num_predict: 12, temperature: 0 }, logit_bias: bias });
  check(typeof r.message.thinking === "string" && r.message.thinking.length > 0 && !r.message.content.includes("think>"),
    "chat: message.thinking", r.message);
  const off = await o.chat({ model: ID, messages: [{ role: "user", content: "Why?" }], think: false, options: { num_predict: 4, temperature: 0 } });
  check(off.message.thinking === undefined && off.message.content.length > 0, "think false: none", off.message);
  const s = await o.chat({ model: ID, messages: [{ role: "user", content: "Why is the sky blue?" }], think: true, stream: true,
    options: { num_predict: 12, temperature: 0 } });
  let thinking = "", content = "", first = null;
  for await (const ch of s) {
    if (ch.message.thinking) { thinking += ch.message.thinking; first ??= "t"; }
    if (ch.message.content) { content += ch.message.content; first ??= "c"; }
  }
  check(thinking.length > 0 && content.length > 0 && first === "t", "streamed: thinking lines, then content", { thinking, content });
  const g = await o.generate({ model: ID, prompt: "Why is the sky blue?", think: true, options: { num_predict: 12, temperature: 0 } });
  check(typeof g.thinking === "string" && g.thinking.length > 0, "generate: thinking", g);
  const bad = await postJson(S, "/api/chat", { model: ID, messages: [{ role: "user", content: "x" }], think: 3 });
  check(bad.status === 400, "think 3 -> 400", bad.body);
});

test("structured output and tool calls apply to the answer only", async () => {
  const c = client(S);
  const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
  const r = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Answer in JSON." }],
    max_tokens: 60, temperature: 0, max_reasoning_tokens: 5, logit_bias: bias,
    response_format: { type: "json_schema", json_schema: { name: "a", strict: true, schema } } });
  const m = r.choices[0].message;
  check(m.reasoning_content === WORD.repeat(5), "the reasoning is free text (the bias shows through)", m);
  let parsed = null;
  try { parsed = JSON.parse(m.content); } catch {}
  check(parsed && typeof parsed.ok === "boolean" && Object.keys(parsed).length === 1, "the answer follows the schema", m.content);
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const t = await c.chat.completions.create({ model: ID, messages: [{ role: "user", content: "Weather in Paris?" }],
    max_tokens: 60, temperature: 0, max_reasoning_tokens: 3, tools, tool_choice: "required" });
  // tool_choice required constrains the answer to a call; random weights may still run out of tokens
  // inside it (then the text stays content), so the check is where the constraint applied
  const tm = t.choices[0].message, tc = tm.tool_calls?.[0];
  check(tm.reasoning_content?.length > 0 && !tm.reasoning_content.includes("<tool_call>"), "the reasoning is free text", tm);
  check(tc ? tc.function.name === "get_weather" : tm.content.startsWith("<tool_call>\n{"), "the answer is the call", tm);
});

test("/tokenize, /detokenize", async () => {
  const t = await postJson(S, "/tokenize", { content: "Hello <|im_start|> world", with_pieces: true });
  const toks = JSON.parse(t.body).tokens;
  check(t.status === 200 && toks.some((x) => x.id === 151644 && x.piece === "<|im_start|>"), "special text -> its token, with pieces", t.body);
  const plain = JSON.parse((await postJson(S, "/tokenize", { content: "Hello <|im_start|> world", parse_special: false })).body).tokens;
  check(!plain.includes(151644) && plain.every((x) => typeof x === "number"), "parse_special false: as text", plain);
  const d = await postJson(S, "/detokenize", { tokens: toks.map((x) => x.id) });
  check(JSON.parse(d.body).content === "Hello <|im_start|> world", "round trip", d.body);
  for (const [path, body] of [["/tokenize", { content: 5 }], ["/detokenize", { tokens: [-1] }], ["/detokenize", { tokens: "x" }],
    ["/tokenize", "not json"], ["/apply-template", { messages: [{ role: "bot", content: "x" }] }]]) {
    const r = await postJson(S, path, body);
    check(r.status === 400 && errorOf(r)?.message, `${path} ${JSON.stringify(body)} -> 400`, r.body);
  }
});

test("/apply-template: the real Thinking template, as Jinja2 renders it", async () => {
  const cases = JSON.parse(readFileSync(join(root, "tests/unit/chat_thinking_cases.json"), "utf8"));
  check(cases.length >= 10, "cases");
  for (const c of cases) {
    const r = await postJson(S, "/apply-template", { messages: c.messages, ...(c.tools ? { tools: c.tools } : {}),
      add_generation_prompt: c.add_generation_prompt });
    check(r.status === 200 && JSON.parse(r.body).prompt === c.prompt, `case '${c.name}'`, r.body);
  }
  const off = await postJson(S, "/apply-template", { messages: [{ role: "user", content: "hi" }], reasoning_effort: "none" });
  check(JSON.parse(off.body).prompt === "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "reasoning off: the empty think block", off.body);
});

runSuite("reasoning", {
  async setup() {
    execFileSync(QVL, ["make-random", "--tiny", "--tokenizer-from", MODEL, "--chat-template",
      join(root, "tests/fixtures/tokenizer/qwen3vl_thinking_chat_template.jinja"), "--out-text", THINK], { stdio: "ignore" });
    S = await startServer(["--reasoning-budget", "4"], {}, { model: THINK, mmproj: null });
    const t = JSON.parse((await postJson(S, "/tokenize", { content: WORD })).body).tokens;
    bias = { [t[0]]: 100 };
    return S;
  },
  alive: (s) => running(s),
  async teardown(s) {
    const ex = await s?.stop();
    check(ex?.code === 0, "exits 0 on SIGTERM", ex);
    rmSync(dir, { recursive: true, force: true });
  },
});
