/* `specdec info MODEL`: what a model file holds and what it costs to run. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/cpu.h"
#include "specdec/twin.h"

int cmd_info(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_INFO, &o, 1);
    if (prc) return prc == 1 ? 0 : 2;
    const char *model = o.pos_args[0], *tokp = o.tokenizer;
    if (!model) return cli_usage_error("info: MODEL is required (see specdec info --help)");
    sd_model *m = NULL;
    int rc = cli_load_model(model, tokp, NULL, &m);
    if (rc) return rc;
    sd_model_describe(m, stdout);
    char twin[1024];
    if (sd_model_twin_of(m, twin, sizeof twin)) printf("twin:           cost twin of %s\n", twin);
    char k[256];
    sd_isa_describe(k, sizeof k);
    printf("kernels:        %s\n", k);
    sd_model_free(m);
    return 0;
}
