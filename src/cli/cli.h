/* The subcommands of the `strata` binary. Each takes the arguments after its
 * name (argv[0] is the subcommand) and returns the process exit status. */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

int cmd_info(int argc, char **argv);

#endif
