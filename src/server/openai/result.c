/* Finished requests as the server keeps them (see result.h). */
#include "server/openai/result.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"

bool api_result_copy(api_result *d, const engine_result *r) {
  memset(d, 0, sizeof *d);
  d->status = r->status;
  snprintf(d->error, sizeof d->error, "%s", r->error);
  d->finish_reason = r->finish_reason;
  d->stop_match = r->stop_match;
  d->prompt_tokens = r->prompt_tokens;
  d->completion_tokens = r->completion_tokens;
  d->image_tokens = r->image_tokens;
  d->cached_prompt_tokens = r->cached_prompt_tokens;
  d->image_cache_hits = r->image_cache_hits;
  d->image_cache_misses = r->image_cache_misses;
  d->t = r->t;
  d->history = r->history;
  if (buf_append(&d->text, r->text ? r->text : "", r->text ? r->text_len : 0) != QVL_OK)
    return false;
  d->reasoning_tokens = r->reasoning_tokens;
  if (buf_append(&d->reasoning, r->reasoning ? r->reasoning : "", r->reasoning ? r->reasoning_len : 0) != QVL_OK)
    return false;
  if (!api_logprobs_copy(&d->lp, r))
    return false;
  if (r->n_images > 0 && !(d->media = calloc((size_t)r->n_images, sizeof *d->media)))
    return false;
  for (int i = 0; i < r->n_images; i++) {
    const prompt_image *im = &r->images[i];
    d->media[i] = (api_media){.index = im->media_index,
                              .ref = {.bytes_key = im->bytes_key, .hash = im->hash, .grid_t = im->grid_t,
                                      .grid_h = im->grid_h, .grid_w = im->grid_w, .n_tokens = im->n_tokens,
                                      .pixels = im->pixels, .resized_pixels = im->resized_pixels,
                                      .width = im->width, .height = im->height,
                                      .bytes = rcbuf_ref(im->source)}};
  }
  d->n_media = r->n_images;
  if (r->n_images > 0 && r->images) {
    if (!(d->images = malloc(sizeof *d->images * (size_t)r->n_images)))
      return false;
    for (int i = 0; i < r->n_images; i++)
      d->images[i] = (engine_image){r->images[i].width, r->images[i].height, r->images[i].message_index};
    d->n_images = r->n_images;
  }
  return true;
}

void api_result_free(api_result *r) {
  if (!r)
    return;
  buf_free(&r->text);
  buf_free(&r->reasoning);
  api_logprobs_free(&r->lp);
  for (int i = 0; i < r->n_media; i++)
    rcbuf_unref(r->media[i].ref.bytes);
  FREE_EACH(r->media, r->images);
  r->media = NULL;
  r->images = NULL;
  r->n_media = r->n_images = 0;
}
