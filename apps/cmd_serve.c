/* qvl serve — the OpenAI-compatible HTTP service: qvl_serve (qvl_tools.h) parses its own
 * settings (flags > environment > YAML file) with the shared option table (qvl_options.h). */
#include "commands.h"
#include "qvl_tools.h"

int cmd_serve(int argc, char **argv) { return qvl_serve(argc, argv, 2); }
