/*
 * Boxes (grounding): the `bbox_2d` / `point_2d` objects of a Qwen3-VL answer in pixels of the
 * images the request sent — the opt-in response extension "boxes" (docs/API.md).
 *
 * Qwen3-VL answers "where is X" with JSON such as [{"bbox_2d": [x1, y1, x2, y2], "label": "cat"}]
 * or {"point_2d": [x, y], "label": ...}, usually in a ```json fence, its coordinates on a 0..1000
 * grid relative to the image it saw (qwen3vl-spec.md §7). That image is the source resized by
 * smart_resize with no padding or crop, so a relative coordinate is the same fraction of the
 * source: pixel = v / 1000 * width (or height) of the image as displayed (EXIF orientation
 * applied), whatever its aspect ratio and whatever resize the request asked for (min/max_pixels).
 *
 * The objects are found as the web page used to find them: in each ```json fence (then in the
 * whole answer), one JSON value, or each flat {...} that parses when the answer was cut short or
 * has prose around it; nested lists are searched too (depth 8); at most BOXES_MAX marks. Keys
 * "bbox_2d" (or "bbox") and "point_2d" (or "point"); the label from "label", "text_content",
 * "name", "category" or "text". Values are clamped to 0..1000, corners ordered.
 *
 * Which image a mark belongs to, with several images:
 *   1. an "image" key in the object (1-based, "Picture 1" as the prompt numbers them) that names
 *      one of the prompt's images;
 *   2. else, when the answer has several groups (```json fences, or a top-level list of lists) and
 *      their count equals the number of images in the last user message that has images, the k-th
 *      group belongs to that message's k-th image;
 *   3. else the last image of the prompt (the one the question is most likely about).
 * The result's "image" is the 0-based index of the image among the prompt's images in order.
 *
 * Thread safety: reentrant.
 */
#ifndef QVL_SERVER_OPENAI_BOXES_H
#define QVL_SERVER_OPENAI_BOXES_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "engine/engine.h"

#define BOXES_MAX 500

/* [{"image": i, "label": "...", "box": [x1, y1, x2, y2]} | {"image", "label", "point": [x, y]}] in
 * pixels (numbers rounded to 0.1), [] when the text has none or there is no image. NULL only when
 * out of memory. */
cJSON *boxes_from_text(const char *text, size_t len, const engine_image *images, int n_images);

#endif
