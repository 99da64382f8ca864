/* The conversation routing key (see session.h). */
#include "server/http/session.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#define SESSION_HEADER_MAX 128

static bool plain_key(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SESSION_HEADER_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == ':' || c == '-'))
      return false;
  }
  return true;
}

/* Hashes a JSON value by structure and content: key order as sent (clients resend history
 * byte-identically), numbers by value. Depth is bounded by the parser's own nesting limit. */
static void hash_json(XXH64_state_t *h, const cJSON *v) {
  for (; v; v = v->next) {
    int type = v->type & 0xff;
    XXH64_update(h, &type, sizeof type);
    if (v->string)
      XXH64_update(h, v->string, strlen(v->string) + 1);
    if (cJSON_IsString(v) && v->valuestring)
      XXH64_update(h, v->valuestring, strlen(v->valuestring) + 1);
    else if (cJSON_IsNumber(v))
      XXH64_update(h, &v->valuedouble, sizeof v->valuedouble);
    if (v->child)
      hash_json(h, v->child);
    int end = -1;
    XXH64_update(h, &end, sizeof end);
  }
}

void session_key(const char *header, const cJSON *root, char out[SESSION_KEY_CAP]) {
  if (header && plain_key(header)) {
    snprintf(out, SESSION_KEY_CAP, "%s", header);
    return;
  }
  if (header && *header) {
    snprintf(out, SESSION_KEY_CAP, "h-%016llx", (unsigned long long)XXH3_64bits(header, strlen(header)));
    return;
  }
  const cJSON *user = root ? cJSON_GetObjectItemCaseSensitive(root, "user") : NULL;
  if (cJSON_IsString(user) && user->valuestring && *user->valuestring) {
    snprintf(out, SESSION_KEY_CAP, "u-%016llx",
             (unsigned long long)XXH3_64bits(user->valuestring, strlen(user->valuestring)));
    return;
  }
  XXH64_state_t *h = XXH64_createState();
  unsigned long long d = 0;
  if (h && XXH64_reset(h, 0) == XXH_OK) {
    const cJSON *msgs = root ? cJSON_GetObjectItemCaseSensitive(root, "messages") : NULL;
    for (const cJSON *m = cJSON_IsArray(msgs) ? msgs->child : NULL; m; m = m->next) {
      /* one message at a time: hash_json walks siblings, so m's own siblings are left out */
      int type = m->type & 0xff;
      XXH64_update(h, &type, sizeof type);
      if (m->child)
        hash_json(h, m->child);
      const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
      if (cJSON_IsString(role) && role->valuestring && !strcmp(role->valuestring, "user"))
        break;
    }
    d = XXH64_digest(h);
  }
  XXH64_freeState(h);
  snprintf(out, SESSION_KEY_CAP, "c-%016llx", d);
}
