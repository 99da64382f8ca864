/* The kernel tuning as the commands show it (docs/KERNELS.md "Tuning"). */
#ifndef QVL_COMMANDS_TUNE_H
#define QVL_COMMANDS_TUNE_H

#include <cjson/cJSON.h>
#include <stdio.h>

/* The tuned shapes of this process, one line each, with every candidate's rate and the choice
 * (nothing when no operation offers a choice on this CPU, with a line that says so). */
void tune_print(FILE *f);
/* The same as a JSON array (for --json outputs). */
cJSON *tune_json(void);

#endif
