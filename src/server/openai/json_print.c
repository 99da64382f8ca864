/* See json_print.h. */
#include "server/openai/json_print.h"

char *json_print_take(cJSON *o) {
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}
