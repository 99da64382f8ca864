/* Boxes (server/openai/boxes.c): bbox_2d / point_2d answers on Qwen3-VL's 0..1000 grid in pixels of
 * the original images — non-square images, any smart_resize, several images per request — and the
 * chat completion's message.boxes / stream chunk. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/preprocess.h"
#include "server/openai/boxes.h"
#include "server/openai/chat_wire.h"
#include "test.h"

static cJSON *run(const char *text, const engine_image *im, int n) {
  cJSON *b = boxes_from_text(text, strlen(text), im, n);
  CHECK(cJSON_IsArray(b), "an array for: %s", text);
  return b;
}

static bool near(double a, double b) { return fabs(a - b) < 1e-9; }

/* Item i: its image, label and coordinates (box or point). */
static bool item_is(const cJSON *b, int i, int image, const char *label, const char *kind, const double *v) {
  const cJSON *o = cJSON_GetArrayItem(b, i);
  const cJSON *img = cJSON_GetObjectItemCaseSensitive(o, "image"), *lab = cJSON_GetObjectItemCaseSensitive(o, "label");
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, kind);
  int n = !strcmp(kind, "box") ? 4 : 2;
  if (!cJSON_IsNumber(img) || img->valueint != image || !cJSON_IsString(lab) || strcmp(lab->valuestring, label) ||
      cJSON_GetArraySize(c) != n)
    return false;
  for (int k = 0; k < n; k++)
    if (!near(cJSON_GetArrayItem(c, k)->valuedouble, v[k]))
      return false;
  return true;
}

static void test_rescale(void) {
  engine_image wide = {640, 480, 0};
  cJSON *b = run("```json\n[{\"bbox_2d\": [100, 200, 500, 800], \"label\": \"cat\"}, {\"point_2d\": [250, 500], \"label\": "
                 "\"eye\"}]\n```",
                 &wide, 1);
  CHECK(cJSON_GetArraySize(b) == 2, "two marks");
  CHECK(item_is(b, 0, 0, "cat", "box", (double[]){64, 96, 320, 384}), "x by the width, y by the height (640x480)");
  CHECK(item_is(b, 1, 0, "eye", "point", (double[]){160, 240}), "point");
  cJSON_Delete(b);
  engine_image tall = {333, 1000, 0}; /* a tall image: x and y must not be swapped or squared */
  b = run("[{\"bbox_2d\": [0, 0, 1000, 1000], \"label\": \"all\"}, {\"bbox_2d\": [500, 250, 600, 300]}]", &tall, 1);
  CHECK(item_is(b, 0, 0, "all", "box", (double[]){0, 0, 333, 1000}), "the whole grid is the whole image");
  CHECK(item_is(b, 1, 0, "", "box", (double[]){166.5, 250, 199.8, 300}), "rounded to 0.1 px, no label");
  cJSON_Delete(b);
}

/* The model saw the image resized by smart_resize (multiples of 32, aspect ratio slightly changed);
 * its relative coordinates are fractions of that resized image, and the resize maps the whole
 * source onto the whole resized image, so pixels of the source are the same fractions of it. */
static void test_resize(void) {
  const struct {
    int w, h;
    int64_t min_px, max_px;
  } cases[] = {{333, 250, 65536, 1 << 20}, {333, 250, 4096, 8192}, {1920, 1080, 65536, 200000}, {50, 30, 65536, 1 << 20},
               {64, 1280, 4096, 65536}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int rh = 0, rw = 0;
    CHECK(image_smart_resize(cases[c].h, cases[c].w, cases[c].min_px, cases[c].max_px, 32, &rh, &rw) == QVL_OK, "resize");
    /* a box the model would draw around resized pixels [rw/4, rh/2) .. [3rw/4, rh): on the grid */
    double gx1 = round(1000.0 * (rw / 4) / rw), gy1 = round(1000.0 * (rh / 2) / rh);
    double gx2 = round(1000.0 * (3 * rw / 4) / rw), gy2 = 1000;
    char text[200];
    snprintf(text, sizeof text, "{\"bbox_2d\": [%g, %g, %g, %g], \"label\": \"r\"}", gx1, gy1, gx2, gy2);
    engine_image im = {cases[c].w, cases[c].h, 0};
    cJSON *b = run(text, &im, 1);
    const cJSON *box = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(b, 0), "box");
    double want[4] = {gx1 / 1000 * cases[c].w, gy1 / 1000 * cases[c].h, gx2 / 1000 * cases[c].w, cases[c].h};
    bool ok = cJSON_GetArraySize(box) == 4;
    for (int k = 0; ok && k < 4; k++)
      ok = fabs(cJSON_GetArrayItem(box, k)->valuedouble - want[k]) <= 0.0501; /* rounded to 0.1 */
    /* and the same place in the source: within one resized pixel of the resized box scaled back */
    double sx = (double)cases[c].w / rw, sy = (double)cases[c].h / rh;
    ok = ok && fabs(cJSON_GetArrayItem(box, 0)->valuedouble - (rw / 4) * sx) <= sx + 0.05 &&
         fabs(cJSON_GetArrayItem(box, 1)->valuedouble - (rh / 2) * sy) <= sy + 0.05;
    CHECK(ok, "%dx%d resized to %dx%d: box in source pixels", cases[c].w, cases[c].h, rw, rh);
    cJSON_Delete(b);
  }
}

static void test_parsing(void) {
  engine_image im = {1000, 1000, 0};
  cJSON *b = run("Here:\n```json\n[{\"bbox_2d\": [1, 2, 3, 4], \"label\": \"a\"}, {\"bbox_2d\": [5, 6, 7, 8], \"label\": "
                 "\"b\"}, {\"bbox_2d\": [9, 1",
                 &im, 1);
  CHECK(cJSON_GetArraySize(b) == 2 && item_is(b, 1, 0, "b", "box", (double[]){5, 6, 7, 8}), "cut short: the complete ones");
  cJSON_Delete(b);
  b = run("{\"bbox_2d\": [900, 900, 100, 100], \"text_content\": \"EXIT\"}", &im, 1);
  CHECK(item_is(b, 0, 0, "EXIT", "box", (double[]){100, 100, 900, 900}), "corners ordered, text_content label");
  cJSON_Delete(b);
  b = run("[{\"bbox_2d\": [-5, \"0\", 1200, 1000], \"label\": \"x\"}, {\"bbox_2d\": [1, 2, 3]}, {\"bbox_2d\": [\"a\", 2, 3, "
          "4]}, {\"point\": [1, 2, 3]}]",
          &im, 1);
  CHECK(cJSON_GetArraySize(b) == 1 && item_is(b, 0, 0, "x", "box", (double[]){0, 0, 1000, 1000}),
        "clamped; malformed ones left out");
  cJSON_Delete(b);
  b = run("A cat sits on a mat at point 3. No boxes here.", &im, 1);
  CHECK(cJSON_GetArraySize(b) == 0, "prose: none");
  cJSON_Delete(b);
  b = run("{\"objects\": {\"found\": [{\"bbox\": [10, 20, 30, 40], \"name\": \"n\"}]}}", &im, 1);
  CHECK(item_is(b, 0, 0, "n", "box", (double[]){10, 20, 30, 40}), "nested, bbox / name keys");
  cJSON_Delete(b);
  b = run("[{\"bbox_2d\": [1, 2, 3, 4]}]", NULL, 0);
  CHECK(cJSON_GetArraySize(b) == 0, "no image: none");
  cJSON_Delete(b);
  buf many = {0};
  buf_append_str(&many, "[");
  for (int i = 0; i < BOXES_MAX + 50; i++)
    buf_append_str(&many, i ? ",{\"point_2d\":[1,2]}" : "{\"point_2d\":[1,2]}");
  buf_append_str(&many, "]");
  b = run(many.data, &im, 1);
  CHECK(cJSON_GetArraySize(b) == BOXES_MAX, "capped at %d: %d", BOXES_MAX, cJSON_GetArraySize(b));
  cJSON_Delete(b);
  buf_free(&many);
}

static void test_attribution(void) {
  /* images 0 (message 0), 1 and 2 (message 2, the last with images) */
  engine_image ims[3] = {{100, 100, 0}, {200, 100, 2}, {100, 400, 2}};
  cJSON *b = run("[{\"point_2d\": [500, 500]}]", ims, 3);
  CHECK(item_is(b, 0, 2, "", "point", (double[]){50, 200}), "one group: the last image");
  cJSON_Delete(b);
  b = run("```json\n[{\"point_2d\": [500, 500], \"label\": \"p\"}]\n```\nand\n```json\n{\"point_2d\": [100, 100], \"label\": "
          "\"q\"}\n```",
          ims, 3);
  CHECK(item_is(b, 0, 1, "p", "point", (double[]){100, 50}) && item_is(b, 1, 2, "q", "point", (double[]){10, 40}),
        "two fences for the last message's two images: one each");
  cJSON_Delete(b);
  b = run("[[{\"point_2d\": [500, 500]}], [{\"point_2d\": [500, 500]}]]", ims, 3);
  CHECK(item_is(b, 0, 1, "", "point", (double[]){100, 50}) && item_is(b, 1, 2, "", "point", (double[]){50, 200}),
        "a list of lists: one list per image");
  cJSON_Delete(b);
  b = run("[{\"point_2d\": [500, 500], \"image\": 1}, {\"point_2d\": [500, 500], \"image\": 9}]", ims, 3);
  CHECK(item_is(b, 0, 0, "", "point", (double[]){50, 50}) && item_is(b, 1, 2, "", "point", (double[]){50, 200}),
        "\"image\": 1 names the first image; an unknown one falls back to the last");
  cJSON_Delete(b);
  b = run("```json\n[{\"point_2d\": [1, 1]}]\n```\n```json\n[{\"point_2d\": [2, 2]}]\n```\n```json\n[{\"point_2d\": [3, 3]}]\n```",
          ims, 3);
  CHECK(cJSON_GetArraySize(b) == 3 && item_is(b, 2, 2, "", "point", (double[]){0.3, 1.2}) &&
            item_is(b, 0, 2, "", "point", (double[]){0.1, 0.4}),
        "three groups for two images: all on the last");
  cJSON_Delete(b);
}

/* The chat completion: message.boxes with "boxes", nothing without; the stream's chunk. */
static void test_chat(void) {
  prompt_image ims[1] = {{.width = 640, .height = 480, .message_index = 0}};
  engine_result er;
  memset(&er, 0, sizeof er);
  er.finish_reason = QVL_FINISH_EOS;
  er.text = "[{\"bbox_2d\": [100, 200, 500, 800], \"label\": \"cat\"}]";
  er.text_len = strlen(er.text);
  er.images = ims;
  er.n_images = 1;
  api_result r;
  CHECK(api_result_copy(&r, &er), "copy");
  CHECK(r.n_images == 1 && r.images && r.images[0].width == 640 && (const void *)r.images != (const void *)ims, "the images are copied");
  cJSON *o = api_completion_object("id", 1, "m", &r);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0), "message");
  CHECK(!cJSON_GetObjectItemCaseSensitive(m, "boxes"), "not asked: no boxes");
  cJSON_Delete(o);
  r.agent.boxes = true;
  o = api_completion_object("id", 1, "m", &r);
  m = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0), "message");
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(m, "boxes");
  CHECK(cJSON_GetArraySize(b) == 1 && item_is(b, 0, 0, "cat", "box", (double[]){64, 96, 320, 384}), "message.boxes");
  cJSON_Delete(o);
  buf out = {0};
  api_agents_stream_tail(&out, "id", 1, "m", &r);
  CHECK(out.data && strstr(out.data, "\"delta\":{\"boxes\":[{\"image\":0,\"label\":\"cat\",\"box\":[64,96,320,384]}]}"),
        "the stream's boxes chunk: %s", out.data ? out.data : "");
  buf_free(&out);
  api_result_free(&r);

  /* "boxes" in a request, and the server default */
  static const char *const ids[] = {"m"};
  api_limits lim = {.max_tokens = 10, .max_images = 2, .max_pixels = 1 << 20, .default_max_pixels = 1 << 20,
                    .default_min_pixels = 65536, .model_ids = ids, .n_model_ids = 1};
  const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"boxes\":true}";
  api_chat_request req;
  api_error e;
  CHECK(api_chat_parse(body, strlen(body), &lim, &req, &e) && req.agent.boxes, "boxes: true");
  api_chat_request_free(&req);
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"boxes\":false}";
  lim.boxes = true;
  CHECK(api_chat_parse(body, strlen(body), &lim, &req, &e) && !req.agent.boxes, "false overrides --boxes");
  api_chat_request_free(&req);
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
  CHECK(api_chat_parse(body, strlen(body), &lim, &req, &e) && req.agent.boxes, "--boxes is the default");
  api_chat_request_free(&req);
  body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"boxes\":\"yes\"}";
  CHECK(!api_chat_parse(body, strlen(body), &lim, &req, &e) && e.http == 400 && !strcmp(e.param, "boxes"), "a bad value: 400");
}

int main(void) {
  test_rescale();
  test_resize();
  test_parsing();
  test_attribution();
  test_chat();
  return TEST_SUMMARY("server_boxes");
}
