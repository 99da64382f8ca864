// End-to-end tests of the smaller fields of the other APIs through the real pinned clients: Ollama's
// logprobs / top_logprobs (the ollama npm client, chat and generate, streamed and not, against the
// chat endpoint's own logprobs), the Responses API's max_tool_calls (openai's responses.create), and
// the "boxes" extension: the random model is made to answer grounding JSON (a json_schema), and the
// boxes the server returns must be that JSON's 0..1000 coordinates in pixels of the original images,
// computed here independently, on the chat endpoint (streamed and not), Responses and Messages.
// Prints "apis_extras: N passed, N failed".
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import { MODEL_ID, check, client, dataUrl, postJson, test, runServerSuite } from "./lib.mjs";

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

// ---- boxes ---------------------------------------------------------------------------------------

const GRID = [0, 120, 250, 500, 750, 1000];
const groundSchema = (withImage) => ({ type: "array", minItems: 1, maxItems: 2, items: { type: "object", additionalProperties: false,
  properties: { bbox_2d: { type: "array", minItems: 4, maxItems: 4, items: { enum: GRID } }, label: { type: "string", maxLength: 6 },
    ...(withImage ? { image: { enum: [1, 2] } } : {}) }, required: ["bbox_2d", "label", ...(withImage ? ["image"] : [])] } });
const SIZES = { "rgb_333x250.png": [333, 250], "scene_64x128.png": [64, 128] };

// The boxes of a grounding answer, computed here: each complete {...} with a bbox_2d, in pixels.
function expectBoxes(text, images, explicit) {
  const out = [];
  for (const m of text.match(/\{[^{}]*\}/g) ?? []) {
    let o;
    try { o = JSON.parse(m); } catch { continue; }
    if (!Array.isArray(o.bbox_2d) || o.bbox_2d.length !== 4) continue;
    const img = explicit ? o.image - 1 : images.length - 1;
    const [w, h] = SIZES[images[img]];
    const [x1, y1, x2, y2] = o.bbox_2d;
    const r = (v) => Math.round(v * 10) / 10;
    out.push({ image: img, label: o.label, box: [r(Math.min(x1, x2) / 1000 * w), r(Math.min(y1, y2) / 1000 * h), r(Math.max(x1, x2) / 1000 * w), r(Math.max(y1, y2) / 1000 * h)] });
  }
  return out;
}

const groundReq = (images, seed, withImage = false) => ({ model: MODEL_ID, max_tokens: 200, temperature: 1, seed, boxes: true,
  response_format: { type: "json_schema", json_schema: { name: "g", strict: true, schema: groundSchema(withImage) } },
  messages: [{ role: "user", content: [...images.map((n) => ({ type: "image_url", image_url: { url: dataUrl(n) } })), { type: "text", text: "find" }] }] });

test("boxes: chat message.boxes and the stream's delta.boxes are the answer's boxes in original pixels", async () => {
  let seen = 0;
  for (let seed = 1; seed <= 2; seed++) {
    for (const [images, explicit] of [[["rgb_333x250.png"], false], [["rgb_333x250.png", "scene_64x128.png"], false], [["rgb_333x250.png", "scene_64x128.png"], true]]) {
      const what = `seed ${seed} ${images.length} image(s)${explicit ? " with image keys" : ""}`;
      const req = groundReq(images, seed, explicit);
      const r = await client(A).chat.completions.create(req);
      const m = r.choices[0].message;
      const want = expectBoxes(m.content, images, explicit);
      seen += want.length;
      check(JSON.stringify(m.boxes) === JSON.stringify(want), `${what}: message.boxes`, { got: m.boxes, want, text: m.content });
      let text = "", boxes;
      for await (const ch of await client(A).chat.completions.create({ ...req, stream: true })) {
        text += ch.choices[0]?.delta?.content ?? "";
        if (ch.choices[0]?.delta?.boxes) boxes = ch.choices[0].delta.boxes;
      }
      check(text === m.content && JSON.stringify(boxes) === JSON.stringify(want), `${what}: streamed`, { boxes, want });
    }
  }
  check(seen >= 4, `the forced answers hold boxes (${seen})`);
  const plain = await client(A).chat.completions.create({ ...groundReq(["rgb_333x250.png"], 1), boxes: undefined });
  check(plain.choices[0].message.boxes === undefined, "not asked: no boxes", plain.choices[0].message);
  const bad = await postJson(A, "/v1/chat/completions", { ...groundReq(["rgb_333x250.png"], 1), boxes: "yes" });
  check(bad.status === 400 && JSON.parse(bad.body).error.param === "boxes", "boxes must be a boolean", bad.body);
}, 240000);

test("boxes: Responses and Messages carry them too", async () => {
  const chat = groundReq(["scene_64x128.png"], 2);
  const schema = chat.response_format.json_schema.schema;
  const r = await client(A).responses.create({ model: MODEL_ID, max_output_tokens: 200, temperature: 1, seed: 2, boxes: true,
    text: { format: { type: "json_schema", name: "g", strict: true, schema } },
    input: [{ role: "user", content: [{ type: "input_image", image_url: dataUrl("scene_64x128.png") }, { type: "input_text", text: "find" }] }] });
  check(JSON.stringify(r.boxes) === JSON.stringify(expectBoxes(r.output_text, ["scene_64x128.png"])) && r.boxes.length >= 1,
    "responses: boxes", { boxes: r.boxes, text: r.output_text });
  // Messages has no response_format: a tool forced with this schema is not text, so ask for boxes of
  // a free answer and check them against that answer's text (usually none for the random model)
  const ant = new Anthropic({ baseURL: A.base, apiKey: "none", maxRetries: 0 });
  const m = await ant.messages.create({ model: MODEL_ID, max_tokens: 30, temperature: 1, seed: 2, boxes: true, messages: [{ role: "user",
    content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: dataUrl("scene_64x128.png").split(",")[1] } }, { type: "text", text: "find" }] }] });
  const text = m.content.map((b) => b.text ?? "").join("");
  check(JSON.stringify(m.boxes) === JSON.stringify(expectBoxes(text, ["scene_64x128.png"])), "messages: boxes", { boxes: m.boxes, text });
}, 120000);

runServerSuite("apis_extras", ["--ctx", "4096"], { started: (s) => (A = s) });
