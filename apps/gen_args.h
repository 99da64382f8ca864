/* The generation options that qvl run and qvl chat share (sampling, length, stop strings). */
#ifndef QVL_APPS_GEN_ARGS_H
#define QVL_APPS_GEN_ARGS_H

#include "engine/generate.h"

/* Takes argv[*i] when it is one of --max-tokens/-n, --temp, --top-k, --top-p, --min-p, --seed,
 * --repeat-penalty, --presence-penalty, --frequency-penalty or --stop (appended to stops, at most
 * max_stops) into gp. Returns 1 when it was (and advances *i past its value), 0 when not, 2 after
 * a message naming cmd. Bad numbers exit(2) as arg_int does. */
int gen_args_take(int argc, char **argv, int *i, gen_params *gp, const char **stops, int *n_stops, int max_stops,
                  const char *cmd);

/* The sampling options the command line does not give take the model's recommendation
 * (vlm.sampling): gen_args_unset_sampling marks them all "not given" before the options are
 * taken, gen_args_model_defaults fills those still unset once the model is loaded. */
void gen_args_unset_sampling(gen_params *gp);
void gen_args_model_defaults(gen_params *gp, const sampler_params *model);

#endif
