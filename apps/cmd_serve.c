/* qvl serve — the OpenAI-compatible HTTP service: qvl_serve (qvl_tools.h) parses its own
 * settings (flags > environment > YAML file), so only --precision is taken here. */
#include "args.h"
#include "commands.h"
#include "qvl_tools.h"

int cmd_serve(int argc, char **argv) {
  if (args_take_precision(&argc, argv, 2, "qvl serve"))
    return 2;
  return qvl_serve(argc, argv, 2);
}
