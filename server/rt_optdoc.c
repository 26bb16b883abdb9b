/* rtraind_optdoc - prints what docs/operations.md and deploy/rtraind.env
 * hold of rtraind's option table, or its flag names (one a line, aliases
 * too), for scripts/options_docs.sh and the tests.
 *   usage: rtraind_optdoc markdown|env|names */
#include <stdio.h>
#include <string.h>

#include "rt_options.h"

int main(int argc, char **argv)
{
    const char *what = argc == 2 ? argv[1] : "";
    if (!strcmp(what, "markdown")) {
        rt_options_markdown(stdout);
    } else if (!strcmp(what, "env")) {
        rt_options_envfile(stdout);
    } else if (!strcmp(what, "names")) {
        for (int i = 0; i < RT_OPT__COUNT; i++)
            printf("%s\n", rt_daemon_options[i].name);
        for (int i = 0; i < rt_daemon_option_n_aliases; i++)
            printf("%s\n", rt_daemon_option_aliases[i].name);
    } else {
        fprintf(stderr, "usage: rtraind_optdoc markdown|env|names\n");
        return 2;
    }
    return 0;
}
