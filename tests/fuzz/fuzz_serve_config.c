/* Fuzz target: qvl serve YAML config files. Any bytes give a config or a message, never a crash,
 * leak or hang. */
#include <stdint.h>
#include <string.h>

#include "server/config/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  server_config c;
  server_config_init(&c);
  server_config_apply_yaml(&c, (const char *)data, size, "fuzz.yaml");
  server_config_free(&c);
  return 0;
}
