/* The subcommands of the `strata` binary. Each takes the arguments after its
 * name (argv[0] is the subcommand) and returns the process exit status. */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include <stdint.h>

/* The CPUs this process may run on (sched_getaffinity), at least 1. */
int cli_default_threads(void);

/* The KV row type options of run and eval: `--kv-type T` sets keys and
 * values, `-ctk`/`--cache-type-k` keys only, `-ctv`/`--cache-type-v` values
 * only. Returns 0 when `a` is none of them, 1 when it was one and v a type
 * (stored), -1 when v is no type (the message, prefixed by cmd, is printed). */
int cli_kv_type_option(const char *cmd, const char *a, const char *v, uint32_t *k_type,
                       uint32_t *v_type);

int cmd_info(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_engine(int argc, char **argv);

#endif
