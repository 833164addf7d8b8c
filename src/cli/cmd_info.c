/* `specdec info MODEL`: what a model file holds and what it costs to run. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "specdec/twin.h"

int cmd_info(int argc, char **argv) {
    const char *model = NULL, *tokp = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: specdec info [-z TOKENIZER] MODEL\n\n"
                   "Prints the architecture, hyperparameters, tensor types and counts, vocabulary\n"
                   "size, special tokens, bytes of weights (and bytes read per decoded token) and the\n"
                   "KV cache bytes per token of MODEL (.gguf, or llama2.c .bin with its tokenizer), and\n"
                   "for a cost twin (specdec mkmodel --twin) what it is a twin of.\n");
            return 0;
        } else if (!strcmp(argv[i], "-z") || !strcmp(argv[i], "--tokenizer")) {
            if (i + 1 >= argc) return cli_usage_error("%s needs a value", argv[i]);
            tokp = argv[++i];
        } else if (argv[i][0] == '-') {
            return cli_usage_error("info: unknown option '%s'", argv[i]);
        } else if (model) {
            return cli_usage_error("info: one model at a time");
        } else {
            model = argv[i];
        }
    }
    if (!model) return cli_usage_error("info: MODEL is required (see specdec info --help)");
    sd_model *m = NULL;
    int rc = cli_load_model(model, tokp, NULL, 0, &m);
    if (rc) return rc;
    sd_model_describe(m, stdout);
    char twin[1024];
    if (sd_model_twin_of(m, twin, sizeof twin)) printf("twin:           cost twin of %s\n", twin);
    sd_model_free(m);
    return 0;
}
