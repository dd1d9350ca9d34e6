/* The subcommands of the `strata` binary. Each takes the arguments after its
 * name (argv[0] is the subcommand) and returns the process exit status. */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

/* The CPUs this process may run on (sched_getaffinity), at least 1. */
int cli_default_threads(void);

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
