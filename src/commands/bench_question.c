/* One media question to its first token (see bench_question.h). */
#include "commands/bench_question.h"

#include "base/timing.h"
#include "engine/generate.h"

cJSON *bench_question_messages(const char *part_type, const char *url, const char *question) {
  cJSON *msgs = cJSON_CreateArray(), *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  cJSON *content = cJSON_AddArrayToObject(u, "content");
  if (url) {
    cJSON *media = cJSON_CreateObject();
    cJSON_AddStringToObject(media, "type", part_type);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(media, part_type), "url", url);
    cJSON_AddItemToArray(content, media);
  }
  cJSON *txt = cJSON_CreateObject();
  cJSON_AddStringToObject(txt, "type", "text");
  cJSON_AddStringToObject(txt, "text", question);
  cJSON_AddItemToArray(content, txt);
  cJSON_AddItemToArray(msgs, u);
  return msgs;
}

qvl_status bench_first_token(const vlm *m, const char *part_type, const char *url, const char *question,
                             const vlm_prompt_opts *po, bench_question_times *t) {
  cJSON *msgs = bench_question_messages(part_type, url, question);
  vlm_prompt_opts defaults;
  if (!po) {
    vlm_prompt_opts_default(&defaults);
    po = &defaults;
  }
  vlm_prompt p = {0};
  double t0 = time_now_s(), c0 = time_process_cpu_s();
  qvl_status st = vlm_prompt_build(m, msgs, po, &p);
  cJSON_Delete(msgs);
  if (st != QVL_OK)
    return st;
  gen_params gp = gen_params_default();
  gp.max_tokens = 1;
  gp.sampling.temperature = 0;
  gen_result r;
  st = generate(m, &p, &gp, NULL, NULL, &r);
  *t = (bench_question_times){.total_ms = (time_now_s() - t0) * 1e3,
                              .total_cpu_ms = (time_process_cpu_s() - c0) * 1e3,
                              .preprocess_ms = p.preprocess_ms,
                              .vision_ms = p.vision_ms,
                              .prefill_ms = r.prefill_ms,
                              .prompt_tokens = p.n};
  gen_result_free(&r);
  vlm_prompt_free(&p);
  return st;
}
