/* The grammar options shared by generate and bench-grammar: --grammar FILE (GBNF), --json-schema
 * FILE|JSON, --json-ws. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/io.h"

int cli_grammar_text(const cli_opts *o, char **text, size_t *len, int *is_schema) {
    *text = NULL;
    *len = 0;
    *is_schema = 0;
    if (o->grammar_file && o->json_schema) return cli_usage_error("--grammar and --json-schema exclude each other");
    const char *src = o->grammar_file ? o->grammar_file : o->json_schema;
    if (!src) return 0;
    *is_schema = !o->grammar_file;
    if (*is_schema && (src[0] == '{' || src[0] == '[' || !strcmp(src, "true"))) {
        *text = strdup(src);
        *len = strlen(src);
        return *text ? 0 : cli_error_status(SD_ERR_NOMEM);
    }
    sd_status st = sd_file_read(src, 0, text, len);
    return st == SD_OK ? 0 : cli_error_status(st);
}

sd_status cli_grammar_compile(const cli_opts *o, const char *text, size_t len, int is_schema, sd_grammar **g) {
    sd_json_schema_params jp = sd_json_schema_default_params();
    jp.whitespace = o->json_compact ? SD_JSON_WS_COMPACT : SD_JSON_WS_BOUNDED;
    if (!text) return sd_grammar_json_object(&jp, g);
    return is_schema ? sd_grammar_from_json_schema_ex(text, len, &jp, g) : sd_grammar_from_gbnf(text, len, NULL, g);
}

int cli_grammar(const cli_opts *o, sd_grammar **g) {
    *g = NULL;
    char *text = NULL;
    size_t len = 0;
    int is_schema = 0, rc = cli_grammar_text(o, &text, &len, &is_schema);
    if (rc || !text) return rc;
    sd_status st = cli_grammar_compile(o, text, len, is_schema, g);
    free(text);
    if (st != SD_OK) {
        cli_usage_error("%s: %s", o->grammar_file ? o->grammar_file : "--json-schema", sd_last_error());
        return 2;
    }
    return 0;
}
