// Videos through qvl serve (issue 23) with the openai npm client: a video_url part (data: URL of the
// fixtures' FFV1/Matroska and H.264/MP4 clips), a follow-up turn about the same clip that encodes
// nothing (its rows come from the prefix cache), the same clip in another conversation served from
// the embedding cache, a mixed image + video message, llama-server's input_video part, per-request
// sampling, bad videos answered 4xx with the OpenAI error body, and POST /video/frames (the web page's
// frame strip) agreeing with the chat request. Prints "video: N passed, N failed".
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { root, MODEL_ID, check, client, postJson, errorOf, metrics, test, runServerSuite, dataUrl } from "./lib.mjs";

let S;
const clip = (name) => readFileSync(join(root, "tests/fixtures/videos", name));
const mkv = () => "data:video/x-matroska;base64," + clip("clip_96x64_10f_5fps.mkv").toString("base64");
const mp4 = () => "data:video/mp4;base64," + clip("clip_96x64_24f_12fps_h264.mp4").toString("base64");
const videoPart = (url) => ({ type: "video_url", video_url: { url } });
// 4 frames of 96x64 at the fixtures' budget: 2 temporal groups of 6 tokens (video_basic)
const SMALL = { min_pixels: 4096, max_pixels: 65536 };

async function ask(messages, extra = {}) {
  return client(S).chat.completions.create({ model: MODEL_ID, messages, max_tokens: 4, temperature: 0, video: SMALL, ...extra });
}

test("video_url: an answer, 12 video tokens, timestamps in the prompt", async () => {
  const r = await ask([{ role: "user", content: [videoPart(mkv()), { type: "text", text: "What happens?" }] }]);
  check(typeof r.choices[0].message.content === "string", "an answer", r);
  check(r.timings?.image_tokens === 12, "2 groups x 6 tokens", r.timings);
  // 12 pads + 2 x (<|vision_start|> <|vision_end|> + "<t.t seconds>") + the template's text
  check(r.usage.prompt_tokens > 12 + 4, "the prompt holds the video and its timestamps", r.usage);
});

test("a follow-up about the same clip encodes nothing; another conversation hits the cache", async () => {
  const first = [{ role: "user", content: [videoPart(mp4()), { type: "text", text: "Describe this video." }] }];
  const r1 = await ask(first);
  const m1 = await metrics(S);
  const r2 = await ask([...first, { role: "assistant", content: r1.choices[0].message.content }, { role: "user", content: "And then?" }]);
  const m2 = await metrics(S);
  check(m2["qvl_image_cache_misses_total"] === m1["qvl_image_cache_misses_total"], "the follow-up ran no vision encode",
        [m1["qvl_image_cache_misses_total"], m2["qvl_image_cache_misses_total"]]);
  check(r2.usage.prompt_tokens_details.cached_tokens > 0 && r2.timings.vision_ms === 0, "its prefix came from the cache", r2.timings);
  const r3 = await ask([{ role: "system", content: "Be brief." }, ...first]);
  const m3 = await metrics(S);
  check(r3.timings.image_cache_hit === true && m3["qvl_image_cache_misses_total"] === m2["qvl_image_cache_misses_total"],
        "the same clip in another conversation: embeddings from the cache", r3.timings);
  // another sampling of the same bytes is another input
  const r4 = await ask(first, { video: { ...SMALL, num_frames: 6 } });
  check(r4.timings.image_tokens === 18 && r4.timings.image_cache_hit === false, "num_frames 6: 3 groups, encoded anew", r4.timings);
});

test("image and video in one message (both orders)", async () => {
  const img = { type: "image_url", image_url: { url: dataUrl("scene_64x128.png") } };
  const a = await ask([{ role: "user", content: [img, videoPart(mkv()), { type: "text", text: "Same scene?" }] }]);
  const b = await ask([{ role: "user", content: [videoPart(mkv()), img, { type: "text", text: "Same scene?" }] }]);
  check(a.timings.image_tokens === b.timings.image_tokens && a.timings.image_tokens > 12, "image + video tokens", [a.timings, b.timings]);
  check(a.usage.prompt_tokens === b.usage.prompt_tokens, "the same prompt length either way", [a.usage, b.usage]);
});

test("llama-server's input_video part and vLLM's sampling fields", async () => {
  const r = await postJson(S, "/v1/chat/completions", {
    model: MODEL_ID, max_tokens: 2, temperature: 0, video: SMALL,
    messages: [{ role: "user", content: [{ type: "input_video", input_video: { data: clip("clip_96x64_10f_5fps.mkv").toString("base64"), format: "x-matroska" } },
                                         { type: "text", text: "What?" }] }],
  });
  check(r.status === 200 && JSON.parse(r.body).timings.image_tokens === 12, "input_video {data, format}", r.body.slice(0, 300));
  const v = await postJson(S, "/v1/chat/completions", {
    model: MODEL_ID, max_tokens: 2, temperature: 0, video: SMALL, media_io_kwargs: { video: { num_frames: 8 } },
    messages: [{ role: "user", content: [{ type: "video", video: mkv() }] }],
  });
  check(v.status === 200 && JSON.parse(v.body).timings.image_tokens === 24, "media_io_kwargs.video.num_frames 8: 4 groups", v.body.slice(0, 300));
});

test("bad videos: 4xx with a message", async () => {
  const bytes = clip("clip_96x64_10f_5fps.mkv");
  const cases = [
    ["data:video/x-matroska;base64," + bytes.subarray(0, 300).toString("base64"), 400, /video 1/],
    ["data:video/mp4;base64," + Buffer.from("not a video at all, just text bytes here").toString("base64"), 400, /not a video|container/],
    [dataUrl("scene_64x128.png"), 400, /this is a PNG image, not a video: send it as an image.*MP4\/MOV/],
    [dataUrl("photo_96x60.jpg"), 400, /this is a JPEG image, not a video/],
    ["http://127.0.0.1:9/clip.mp4", 400, /./],
    ["/etc/passwd", 400, /./],
  ];
  for (const [url, status, re] of cases) {
    const r = await postJson(S, "/v1/chat/completions", { model: MODEL_ID, max_tokens: 2, video: SMALL,
      messages: [{ role: "user", content: [videoPart(url), { type: "text", text: "?" }] }] });
    const e = errorOf(r);
    check(r.status === status && e && re.test(e.message) && e.type === "invalid_request_error", `${url.slice(0, 40)}: ${status}`, [r.status, r.body.slice(0, 300)]);
  }
  const many = await postJson(S, "/v1/chat/completions", { model: MODEL_ID, max_tokens: 2, video: { ...SMALL, num_frames: 600 },
    messages: [{ role: "user", content: [videoPart(mkv())] }] });
  check(many.status === 400 && /video.num_frames/.test(errorOf(many)?.message), "num_frames above --video-max-frames", many.body);
  const both = await postJson(S, "/v1/chat/completions", { model: MODEL_ID, max_tokens: 2, video: { fps: 1, num_frames: 4 },
    messages: [{ role: "user", content: [videoPart(mkv())] }] });
  check(both.status === 400 && /exclude/.test(errorOf(both)?.message), "fps and num_frames", both.body);
  const three = await postJson(S, "/v1/chat/completions", { model: MODEL_ID, max_tokens: 2, video: SMALL,
    messages: [{ role: "user", content: [videoPart(mkv()), videoPart(mkv()), videoPart(mkv())] }] });
  check(three.status === 413 && /at most 2/.test(errorOf(three)?.message), "more videos than --max-videos", three.body);
  const miss = await postJson(S, "/v1/chat/completions", { model: MODEL_ID, max_tokens: 2,
    messages: [{ role: "user", content: [{ type: "video_url", video_url: {} }] }] });
  check(miss.status === 400 && /URL/.test(errorOf(miss)?.message), "a video part without URL", miss.body);
  // too long for --video-max-seconds 2 (the clip lasts 2 s; the MP4 one 2 s too) -- see the server args
  const r = await ask([{ role: "user", content: [videoPart(mp4())] }]).catch((e) => e);
  check(!(r instanceof Error), "a clip within --video-max-seconds is fine", r?.message);
});

test("Responses input_video and an async job with a video", async () => {
  const r = await client(S).responses.create({ model: MODEL_ID, max_output_tokens: 3, temperature: 0, video: SMALL,
    input: [{ role: "user", content: [{ type: "input_video", video_url: mkv() }, { type: "input_text", text: "What happens?" }] }] });
  check(r.status === "completed" || r.status === "incomplete", "a response", r);
  check(r.usage.input_tokens > 12, "the video is in the prompt", r.usage);
  const bad = await postJson(S, "/v1/responses", { model: MODEL_ID, input: [{ role: "user", content: [{ type: "input_video" }] }] });
  check(bad.status === 400 && /video_url/.test(errorOf(bad)?.message), "input_video without video_url", bad.body);
  const j = await postJson(S, "/v1/jobs", { model: MODEL_ID, max_tokens: 2, temperature: 0, video: SMALL,
    messages: [{ role: "user", content: [videoPart(mp4()), { type: "text", text: "?" }] }] });
  check(j.status === 202, "job accepted", j.body);
  const id = JSON.parse(j.body).id;
  let got = null;
  for (let i = 0; i < 200 && !(got && (got.status === "done" || got.status === "failed")); i++) {
    got = await (await fetch(`${S.base}/v1/jobs/${id}`)).json();
    await new Promise((res) => setTimeout(res, 50));
  }
  check(got?.status === "done", "the video job is done", got);
});

test("POST /video/frames: the frames a chat request samples, with times and thumbnails", async () => {
  // the same clip and sampling as the chat above: 12 video tokens there, so 12 here
  const r = await postJson(S, "/video/frames", { video_url: { url: mkv() }, video: SMALL, thumbnail: { width: 48, height: 48 } });
  check(r.status === 200, "200", r.body.slice(0, 300));
  const j = JSON.parse(r.body);
  check(JSON.stringify(j.frames.map((f) => f.index)) === "[0,3,6,9]", "linspace(0, 9, 4)", j.frames);
  check(j.frames[1].time_s === 3 / 5 && j.frames[1].group === 0 && j.frames[2].group === 1, "time = index / fps, two frames a group", j.frames);
  check(JSON.stringify(j.groups.map((g) => g.text)) === JSON.stringify(["<0.3 seconds>", "<1.5 seconds>"]), "the prompt's timestamps", j.groups);
  check(j.video_tokens === 12 && JSON.stringify(j.video_grid_thw) === "[2,4,6]", "the chat's 12 video tokens", j);
  check(j.thumbnails.width === 48 && j.thumbnails.height === 32 && j.thumbnails.data.length === 4, "4 thumbnails of 48x32", j.thumbnails.width);
  check(j.thumbnails.data.every((d) => Buffer.from(d, "base64").length === 48 * 32 * 3), "rgb24 thumbnails", null);
  const chat = await ask([{ role: "user", content: [videoPart(mkv()), { type: "text", text: "?" }] }]);
  check(chat.timings?.image_tokens === j.video_tokens, "the chat request agrees", chat.timings);
  // the chat's caps and errors, before anything is asked
  const many = await postJson(S, "/video/frames", { video_url: { url: mkv() }, video: { num_frames: 33 } });
  check(many.status === 400 && errorOf(many)?.param === "video.num_frames", "num_frames above --video-max-frames", many.body);
  const junk = await postJson(S, "/video/frames", { video_url: { url: "data:video/mp4;base64," + Buffer.from("no video here").toString("base64") } });
  check(junk.status === 400 && /not a video/.test(errorOf(junk)?.message), "not a video", junk.body);
  const get = await fetch(`${S.base}/video/frames`);
  check(get.status === 405, "GET is 405", get.status);
});

runServerSuite("video", ["--ctx", "4096", "--video-max-frames", "32", "--video-max-seconds", "2"], { started: (s) => { S = s; } });
