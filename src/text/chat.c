#include "text/chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/free_each.h"
#include "base/status.h"

#define VISION_PLACEHOLDER "<|vision_start|><|image_pad|><|vision_end|>"
#define VIDEO_PLACEHOLDER "<|vision_start|><|video_pad|><|vision_end|>"

static bool has_key(const cJSON *obj, const char *key) {
  return cJSON_IsObject(obj) && cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
}

static const char *type_of(const cJSON *item) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(item, "type");
  return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* The template's test for an image: type == 'image' or an 'image' / 'image_url' key. */
static bool is_image_item(const cJSON *item) {
  const char *t = type_of(item);
  return (t && !strcmp(t, "image")) || has_key(item, "image") || has_key(item, "image_url");
}

/* The template's test for a video (type 'video' or a 'video' key), and the OpenAI-style part of
 * vLLM and SGLang (type 'video_url' / a 'video_url' key), which they turn into the former. */
static bool is_video_item(const cJSON *item) {
  const char *t = type_of(item);
  return (t && (!strcmp(t, "video") || !strcmp(t, "video_url"))) || has_key(item, "video") ||
         has_key(item, "video_url");
}

/* The URL of an image or video part: item[url_key] as a string or {url}, else item[bare_key]. */
static const char *media_url_of(const cJSON *item, const char *url_key, const char *bare_key) {
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(item, url_key);
  if (cJSON_IsString(u))
    return u->valuestring;
  if (cJSON_IsObject(u)) {
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(u, "url");
    if (cJSON_IsString(url))
      return url->valuestring;
  }
  const cJSON *bare = cJSON_GetObjectItemCaseSensitive(item, bare_key);
  return cJSON_IsString(bare) ? bare->valuestring : NULL;
}

static qvl_status add_media(chat_prompt *p, const cJSON *item, int msg, bool is_video) {
  chat_image *grown = realloc(p->images, sizeof *grown * (size_t)(p->n_images + 1));
  if (!grown)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory listing %s", is_video ? "videos" : "images");
  p->images = grown;
  const char *url = is_video ? media_url_of(item, "video_url", "video") : media_url_of(item, "image_url", "image");
  p->images[p->n_images++] = (chat_image){item, url, msg, is_video};
  return QVL_OK;
}

/* Appends text that came from a user or a tool and records it as a plain span (chat_prompt.plain);
 * a span that continues the previous one is merged into it. */
static qvl_status append_plain(chat_prompt *p, const char *text) {
  size_t begin = p->text.len;
  QVL_TRY(buf_append_str(&p->text, text));
  if (p->text.len == begin)
    return QVL_OK;
  if (p->n_plain && p->plain[p->n_plain - 1].end == begin) {
    p->plain[p->n_plain - 1].end = p->text.len;
    return QVL_OK;
  }
  if (p->n_plain == p->cap_plain) {
    size_t cap = p->cap_plain ? p->cap_plain * 2 : 8;
    text_span *grown = realloc(p->plain, cap * sizeof *grown);
    if (!grown)
      return qvl_errorf(QVL_ERR_NOMEM, "out of memory listing content spans");
    p->plain = grown;
    p->cap_plain = cap;
  }
  p->plain[p->n_plain++] = (text_span){begin, p->text.len};
  return QVL_OK;
}

/* Appends item.text (to the prompt as plain content when p is given, else to b); the template prints
 * whatever is there, so a non-string text is an error rather than a guess at Python's str() of it. */
static qvl_status append_text_item(buf *b, chat_prompt *p, const cJSON *item, int msg, int idx) {
  const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "text");
  if (cJSON_IsNull(text))
    return QVL_OK;
  if (!cJSON_IsString(text))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "messages[%d].content[%d].text must be a string", msg, idx);
  return p ? append_plain(p, text->valuestring) : buf_append_str(b, text->valuestring);
}

/* Content of a user or tool message (and of every message in the Thinking template): string, or a
 * list of text / image / video items, appended to b; without with_media (system and assistant
 * content) only the items' text, other items passed over. Images are listed in p (NULL: not listed, for
 * the Thinking template's look-ahead that only inspects the text). Text is recorded as a plain span
 * (special-token text in it stays text) only when it goes straight into the prompt, b == &p->text. */
static qvl_status render_content(buf *b, chat_prompt *p, const cJSON *content, int msg, bool with_media) {
  if (cJSON_IsString(content))
    return p && b == &p->text ? append_plain(p, content->valuestring) : buf_append_str(b, content->valuestring);
  if (!content || cJSON_IsNull(content))
    return QVL_OK;
  if (!cJSON_IsArray(content))
    return qvl_errorf(QVL_ERR_INVALID_ARG,
                      "messages[%d].content must be a string or an array of content parts", msg);
  int idx = 0;
  for (const cJSON *item = content->child; item; item = item->next, idx++) {
    if (!cJSON_IsObject(item))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "messages[%d].content[%d] must be an object", msg, idx);
    if (with_media && is_image_item(item)) {
      QVL_TRY(buf_append_str(b, VISION_PLACEHOLDER));
      if (p)
        QVL_TRY(add_media(p, item, msg, false));
    } else if (with_media && is_video_item(item)) {
      QVL_TRY(buf_append_str(b, VIDEO_PLACEHOLDER));
      if (p)
        QVL_TRY(add_media(p, item, msg, true));
    } else if (has_key(item, "text")) {
      QVL_TRY(append_text_item(b, p && b == &p->text ? p : NULL, item, msg, idx));
    } else if (with_media) {
      const char *t = type_of(item);
      return qvl_errorf(QVL_ERR_INVALID_ARG,
                        "messages[%d].content[%d]: unknown content part type '%s' (expected text, "
                        "image_url or video_url)",
                        msg, idx, t ? t : "(none)");
    }
  }
  return QVL_OK;
}

static qvl_status render_media_into(buf *b, chat_prompt *p, const cJSON *content, int msg) {
  return render_content(b, p, content, msg, true);
}

static qvl_status render_media_content(chat_prompt *p, const cJSON *content, int msg) {
  return render_media_into(&p->text, p, content, msg);
}

/* System and assistant content: a string, or the text of every item that has one. */
static qvl_status render_text_content(buf *b, const cJSON *content, int msg) {
  return render_content(b, NULL, content, msg, false);
}

static bool content_truthy(const cJSON *content) {
  if (cJSON_IsString(content))
    return content->valuestring[0] != 0;
  if (cJSON_IsArray(content))
    return content->child != NULL;
  return false;
}

/* has_content: whether the first call is preceded by a newline (the Instruct template tests the
 * message's content, the Thinking one the answer text left after its reasoning is split off). */
static qvl_status render_tool_calls(buf *b, const cJSON *msg_obj, int msg, bool has_content) {
  const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg_obj, "tool_calls");
  if (!calls || cJSON_IsNull(calls))
    return QVL_OK;
  if (!cJSON_IsArray(calls))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "messages[%d].tool_calls must be an array", msg);
  int i = 0;
  for (const cJSON *call = calls->child; call; call = call->next, i++) {
    if (i > 0 || has_content)
      QVL_TRY(buf_append_str(b, "\n"));
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *def = fn ? fn : call;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(def, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(def, "arguments");
    if (!cJSON_IsString(name))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "messages[%d].tool_calls[%d] has no function name", msg, i);
    QVL_TRY(buf_append_str(b, "<tool_call>\n{\"name\": \""));
    QVL_TRY(buf_append_str(b, name->valuestring));
    QVL_TRY(buf_append_str(b, "\", \"arguments\": "));
    if (cJSON_IsString(args))
      QVL_TRY(buf_append_str(b, args->valuestring));
    else
      QVL_TRY(chat_tojson(args, b));
    QVL_TRY(buf_append_str(b, "}\n</tool_call>"));
  }
  return QVL_OK;
}

static const char *role_of(const cJSON *m) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
  return cJSON_IsString(r) ? r->valuestring : NULL;
}

/* The first message's system text: the Thinking template renders it like any content (images
 * included), the Instruct one keeps only its text parts. */
static qvl_status render_system_content(chat_prompt *p, const cJSON *content, const chat_render_opts *o) {
  if (o->thinking)
    return render_media_content(p, content, 0);
  return render_text_content(&p->text, content, 0);
}

static qvl_status render_system_block(chat_prompt *p, const cJSON *messages, const chat_render_opts *o) {
  const cJSON *tools = o->tools;
  const cJSON *first = messages->child;
  bool first_is_system = first && role_of(first) && !strcmp(role_of(first), "system");
  const cJSON *sys_content = first_is_system ? cJSON_GetObjectItemCaseSensitive(first, "content") : NULL;
  bool have_tools = cJSON_IsArray(tools) && tools->child;
  if (have_tools) {
    QVL_TRY(buf_append_str(&p->text, "<|im_start|>system\n"));
    if (first_is_system) {
      QVL_TRY(render_system_content(p, sys_content, o));
      QVL_TRY(buf_append_str(&p->text, "\n\n"));
    }
    QVL_TRY(buf_append_str(&p->text,
                           "# Tools\n\nYou may call one or more functions to assist with the user "
                           "query.\n\nYou are provided with function signatures within <tools></tools> "
                           "XML tags:\n<tools>"));
    for (const cJSON *tool = tools->child; tool; tool = tool->next) {
      QVL_TRY(buf_append_str(&p->text, "\n"));
      QVL_TRY(chat_tojson(tool, &p->text));
    }
    QVL_TRY(buf_append_str(&p->text,
                           "\n</tools>\n\nFor each function call, return a json object with function "
                           "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                           "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
                           "</tool_call><|im_end|>\n"));
  } else if (first_is_system) {
    QVL_TRY(buf_append_str(&p->text, "<|im_start|>system\n"));
    QVL_TRY(render_system_content(p, sys_content, o));
    QVL_TRY(buf_append_str(&p->text, "<|im_end|>\n"));
  }
  return QVL_OK;
}

/* ---- the Thinking template's assistant turns ----
 * Python's str.strip family on '\n' only, as the template calls them. */
static void lstrip_nl(const char **s, size_t *n) {
  while (*n && **s == '\n')
    (*s)++, (*n)--;
}

static void rstrip_nl(const char *s, size_t *n) {
  while (*n && s[*n - 1] == '\n')
    (*n)--;
}

/* Last occurrence of needle in s[0..n) (NULL if none). */
static const char *find_last(const char *s, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
    if (!memcmp(s + i, needle, k))
      return s + i;
  return NULL;
}

static const char *find_first(const char *s, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(s + i, needle, k))
      return s + i;
  return NULL;
}

/* The index of the last user message that is a real query (not a wrapped tool response), as the
 * template's reverse scan finds it; the number of messages - 1 when there is none. */
static qvl_status last_query_index(const cJSON *messages, int n, int *out) {
  *out = n - 1;
  int i = n - 1;
  for (const cJSON *m = cJSON_GetArrayItem(messages, n - 1); m; m = m == messages->child ? NULL : m->prev, i--) {
    if (strcmp(role_of(m), "user"))
      continue;
    buf t = {0};
    qvl_status s = buf_append(&t, "", 0);
    if (s == QVL_OK)
      s = render_media_into(&t, NULL, cJSON_GetObjectItemCaseSensitive(m, "content"), i);
    if (s != QVL_OK) {
      buf_free(&t);
      return s;
    }
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    bool wrapped = t.len >= sizeof open - 1 && !memcmp(t.data, open, sizeof open - 1) &&
                   t.len >= sizeof close - 1 && !memcmp(t.data + t.len - (sizeof close - 1), close, sizeof close - 1);
    buf_free(&t);
    if (!wrapped) {
      *out = i;
      return QVL_OK;
    }
  }
  return QVL_OK;
}

/* An assistant message under the Thinking template: its reasoning (reasoning_content, or the text
 * before </think> in its content) is kept only after the last user query, so earlier turns'
 * reasoning never reaches the prompt. */
static qvl_status render_thinking_assistant(chat_prompt *p, const cJSON *m, int i, bool after_query, bool last) {
  buf c = {0};
  QVL_TRY(buf_append(&c, "", 0));
  qvl_status s = render_media_into(&c, p, cJSON_GetObjectItemCaseSensitive(m, "content"), i);
  const char *content = c.data, *reason = "";
  size_t n_content = c.len, n_reason = 0;
  const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
  if (cJSON_IsString(rc)) {
    reason = rc->valuestring;
    n_reason = strlen(reason);
  } else if (s == QVL_OK && find_first(c.data, c.len, "</think>")) {
    const char *end = find_first(c.data, c.len, "</think>");
    n_reason = (size_t)(end - c.data);
    rstrip_nl(c.data, &n_reason);
    const char *open = find_last(c.data, n_reason, "<think>");
    reason = open ? open + 7 : c.data;
    n_reason -= (size_t)(reason - c.data);
    lstrip_nl(&reason, &n_reason);
    const char *after = find_last(c.data, c.len, "</think>") + 8;
    n_content = c.len - (size_t)(after - c.data);
    content = after;
    lstrip_nl(&content, &n_content);
  }
  if (s == QVL_OK)
    s = buf_append_str(&p->text, "<|im_start|>assistant\n");
  if (s == QVL_OK && after_query && (last || n_reason)) {
    const char *r = reason;
    size_t nr = n_reason;
    lstrip_nl(&r, &nr);
    rstrip_nl(r, &nr);
    s = buf_append_str(&p->text, "<think>\n");
    if (s == QVL_OK)
      s = buf_append(&p->text, r, nr);
    if (s == QVL_OK)
      s = buf_append_str(&p->text, "\n</think>\n\n");
    lstrip_nl(&content, &n_content);
  }
  if (s == QVL_OK)
    s = buf_append(&p->text, content, n_content);
  if (s == QVL_OK)
    s = render_tool_calls(&p->text, m, i, n_content > 0);
  buf_free(&c);
  return s;
}

static qvl_status render_all(const cJSON *messages, const chat_render_opts *o, chat_prompt *p) {
  const cJSON *tools = o->tools;
  if (!cJSON_IsArray(messages))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "messages must be an array");
  if (!messages->child)
    return qvl_errorf(QVL_ERR_INVALID_ARG, "messages must not be empty");
  if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
    return qvl_errorf(QVL_ERR_INVALID_ARG, "tools must be an array");
  int i = 0;
  for (const cJSON *m = messages->child; m; m = m->next, i++) {
    if (!cJSON_IsObject(m))
      return qvl_errorf(QVL_ERR_INVALID_ARG, "messages[%d] must be an object", i);
    const char *role = role_of(m);
    if (!role)
      return qvl_errorf(QVL_ERR_INVALID_ARG, "messages[%d] has no string 'role'", i);
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
        strcmp(role, "tool"))
      return qvl_errorf(QVL_ERR_INVALID_ARG,
                        "messages[%d].role '%s' is not one of system, user, assistant, tool", i, role);
  }
  p->msg_off = malloc(sizeof *p->msg_off * (size_t)(i + 1));
  if (!p->msg_off)
    return qvl_errorf(QVL_ERR_NOMEM, "out of memory");
  p->n_msgs = i;
  int n_messages = i, last_query = n_messages - 1;
  if (o->thinking)
    QVL_TRY(last_query_index(messages, n_messages, &last_query));
  QVL_TRY(render_system_block(p, messages, o));
  i = 0;
  for (const cJSON *m = messages->child; m; m = m->next, i++) {
    p->msg_off[i] = p->text.len;
    const char *role = role_of(m);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!strcmp(role, "user") || (o->thinking && !strcmp(role, "system") && i > 0)) {
      /* The Thinking template keeps later system messages; the Instruct one drops them. */
      QVL_TRY(buf_printf(&p->text, "<|im_start|>%s\n", role));
      QVL_TRY(render_media_content(p, content, i));
      QVL_TRY(buf_append_str(&p->text, "<|im_end|>\n"));
    } else if (!strcmp(role, "assistant") && o->thinking) {
      QVL_TRY(render_thinking_assistant(p, m, i, i > last_query, m->next == NULL));
      QVL_TRY(buf_append_str(&p->text, "<|im_end|>\n"));
    } else if (!strcmp(role, "assistant")) {
      QVL_TRY(buf_append_str(&p->text, "<|im_start|>assistant\n"));
      QVL_TRY(render_text_content(&p->text, content, i));
      QVL_TRY(render_tool_calls(&p->text, m, i, content_truthy(content)));
      QVL_TRY(buf_append_str(&p->text, "<|im_end|>\n"));
    } else if (!strcmp(role, "tool")) {
      const char *prev = m->prev && m != messages->child ? role_of(m->prev) : NULL;
      const char *next = m->next ? role_of(m->next) : NULL;
      if (!prev || strcmp(prev, "tool"))
        QVL_TRY(buf_append_str(&p->text, "<|im_start|>user"));
      QVL_TRY(buf_append_str(&p->text, "\n<tool_response>\n"));
      QVL_TRY(render_media_content(p, content, i));
      QVL_TRY(buf_append_str(&p->text, "\n</tool_response>"));
      if (!next || strcmp(next, "tool"))
        QVL_TRY(buf_append_str(&p->text, "<|im_end|>\n"));
    }
    /* A system message renders only as the first message (above) in the Instruct template. */
  }
  p->msg_off[p->n_msgs] = p->text.len;
  if (o->add_generation_prompt) {
    QVL_TRY(buf_append_str(&p->text, o->thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n"));
    /* No reasoning: the empty think block the template renders for a turn without any. */
    if (o->thinking && o->skip_thinking)
      QVL_TRY(buf_append_str(&p->text, "\n</think>\n\n"));
  }
  return QVL_OK;
}

qvl_status chat_render_with(const cJSON *messages, const chat_render_opts *o, chat_prompt *out) {
  memset(out, 0, sizeof *out);
  qvl_status s = buf_append(&out->text, "", 0);
  if (s == QVL_OK)
    s = render_all(messages, o, out);
  if (s != QVL_OK)
    chat_prompt_free(out);
  return s;
}

qvl_status chat_render(const cJSON *messages, const cJSON *tools, bool add_generation_prompt,
                       chat_prompt *out) {
  chat_render_opts o = {.tools = tools, .add_generation_prompt = add_generation_prompt};
  return chat_render_with(messages, &o, out);
}

bool chat_template_is_thinking(const char *tmpl) {
  if (!tmpl)
    return false;
  /* The generation prompt is the template's last add_generation_prompt block; a reasoning model's
   * opens a think block there. Hybrid templates (Qwen3's enable_thinking) leave the choice to the
   * model and are not reasoning-first. */
  const char *agp = NULL;
  for (const char *q = strstr(tmpl, "add_generation_prompt"); q; q = strstr(q + 1, "add_generation_prompt"))
    agp = q;
  return agp && strstr(agp, "<think>") && !strstr(tmpl, "enable_thinking");
}

void chat_prompt_free(chat_prompt *p) {
  buf_free(&p->text);
  FREE_EACH(p->images, p->msg_off, p->plain);
  *p = (chat_prompt){0}; /* left empty, as a fresh one */
}

static qvl_status json_string(buf *b, const char *s) {
  QVL_TRY(buf_append_str(b, "\""));
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': QVL_TRY(buf_append_str(b, "\\\"")); break;
    case '\\': QVL_TRY(buf_append_str(b, "\\\\")); break;
    case '\n': QVL_TRY(buf_append_str(b, "\\n")); break;
    case '\r': QVL_TRY(buf_append_str(b, "\\r")); break;
    case '\t': QVL_TRY(buf_append_str(b, "\\t")); break;
    case '\b': QVL_TRY(buf_append_str(b, "\\b")); break;
    case '\f': QVL_TRY(buf_append_str(b, "\\f")); break;
    default:
      if (*c < 0x20)
        QVL_TRY(buf_printf(b, "\\u%04x", *c));
      else
        QVL_TRY(buf_append(b, c, 1));
    }
  }
  return buf_append_str(b, "\"");
}

/* Python's float repr is the shortest round-tripping form; integral values print without a point
 * because cJSON does not keep the int/float distinction (1.0 in the input prints as 1). */
static qvl_status json_number(buf *b, double v) {
  if (v == floor(v) && fabs(v) < 1e15)
    return buf_printf(b, "%.0f", v);
  char tmp[32];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    if (strtod(tmp, NULL) == v)
      break;
  }
  return buf_append_str(b, tmp);
}

qvl_status chat_tojson(const cJSON *v, buf *b) {
  if (!v || cJSON_IsNull(v))
    return buf_append_str(b, "null");
  if (cJSON_IsTrue(v))
    return buf_append_str(b, "true");
  if (cJSON_IsFalse(v))
    return buf_append_str(b, "false");
  if (cJSON_IsNumber(v))
    return json_number(b, v->valuedouble);
  if (cJSON_IsString(v))
    return json_string(b, v->valuestring);
  bool obj = cJSON_IsObject(v);
  QVL_TRY(buf_append_str(b, obj ? "{" : "["));
  for (const cJSON *c = v->child; c; c = c->next) {
    if (c != v->child)
      QVL_TRY(buf_append_str(b, ", "));
    if (obj) {
      QVL_TRY(json_string(b, c->string ? c->string : ""));
      QVL_TRY(buf_append_str(b, ": "));
    }
    QVL_TRY(chat_tojson(c, b));
  }
  return buf_append_str(b, obj ? "}" : "]");
}
