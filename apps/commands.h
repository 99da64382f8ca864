/* The qvl subcommands; each returns the process exit code. */
#ifndef QVL_APPS_COMMANDS_H
#define QVL_APPS_COMMANDS_H

int cmd_dump(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_loadtest(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_make_random(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_batch(int argc, char **argv);

#endif
