/* API keys (see auth.h). */
#include "server/http/auth.h"

#include <string.h>
#include <strings.h>

/* The caller's API key: "Authorization: Bearer KEY" (OpenAI) or "x-api-key: KEY" (Anthropic);
 * NULL when neither is there. */
static const char *caller_key(struct MHD_Connection *c) {
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (h && !strncasecmp(h, "Bearer ", 7)) {
    h += 7;
    while (*h == ' ')
      h++;
    return h;
  }
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
}

bool auth_key_ok(server *s, struct MHD_Connection *c) {
  const server_config *cfg = s->cfg;
  if (cfg->n_api_keys == 0)
    return true;
  const char *h = caller_key(c);
  if (!h)
    return false;
  size_t n = strlen(h);
  bool ok = false;
  for (int i = 0; i < cfg->n_api_keys; i++) {
    const char *k = cfg->api_keys[i];
    size_t kn = strlen(k);
    /* constant time in the key's content: no early exit on the first differing byte */
    unsigned char diff = (unsigned char)(kn != n);
    for (size_t j = 0; j < kn; j++)
      diff |= (unsigned char)(k[j] ^ (j < n ? h[j] : 0));
    ok |= diff == 0;
  }
  return ok;
}

/* The owner of the jobs a caller makes and sees (jobs.h): a hash of its API key, "" without keys.
 * Called after auth_key_ok, so the token is one of the configured keys. */
void auth_owner(server *s, struct MHD_Connection *c, char out[JOBS_OWNER_CAP]) {
  out[0] = '\0';
  const char *h = caller_key(c);
  if (s->cfg->n_api_keys == 0 || !h)
    return;
  jobs_owner_of(h, out);
}
