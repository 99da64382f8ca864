/* Small command-line helpers shared by the qvl subcommands. */
#ifndef QVL_APPS_ARGS_H
#define QVL_APPS_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* Matches argv[*i] against a long/short flag with a value ("--top-k 5", "--top-k=5"); on a match
 * stores the value, advances *i and returns true. Exits with a usage error if the value is missing. */
bool arg_value(int argc, char **argv, int *i, const char *long_name, const char *short_name, const char **out);
bool arg_flag(char **argv, int i, const char *long_name, const char *short_name);
/* Parse numbers or exit(2) with a message naming the flag. */
int64_t arg_int(const char *flag, const char *v, int64_t min, int64_t max);
double arg_double(const char *flag, const char *v, double min, double max);
/* Model files from --hf REPO[:QUANT] (downloaded into the cache, or found there when offline). On
 * success *model and *mmproj point to strings that live until the process ends. */
int resolve_hf(const char *spec, bool offline, const char **model, const char **mmproj);
 /* Takes "--precision exact|fast" (or "--precision=...") out of argv[start..] and applies it to
 * the vision towers loaded afterwards (qvl_set_precision); also checks QVL_PRECISION. Returns 0,
 * or 2 after printing a message naming cmd. Removed entries shorten *argc. */
int args_take_precision(int *argc, char **argv, int start, const char *cmd);
/* The same for "--kv-type f16|f32" and QVL_KV_TYPE: the KV cache element type of the engines and
 * sequences made afterwards (qvl_set_kv_type). */
int args_take_kv_type(int *argc, char **argv, int start, const char *cmd);
/* Prints "qvl: <msg>: <qvl_last_error()>" and returns the exit code for a status. */
int report_error(const char *what, int status);

#endif
