/* `specdec tokenize`: the token ids (or ids and pieces) of a text under a model's tokenizer,
 * which is read from a GGUF's metadata, a Hugging Face directory, a tokenizer.json or a
 * tokenizer.bin without loading any weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/tokenizer.h"

/* Text as a quoted literal: printable UTF-8 as it is; quotes, backslashes and control
 * characters escaped; bytes that are not part of a valid character (a token may hold part of
 * one) as \xNN. */
static void print_quoted(const char *s, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        for (size_t k = 1; l && k < l; k++)
            if (i + k >= n || ((unsigned char)s[i + k] & 0xC0) != 0x80) l = 0;
        if (l > 1) {
            fwrite(s + i, 1, l, stdout);
            i += l;
            continue;
        }
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\'' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7F) printf("\\x%02x", c);
        else putchar(c);
        i++;
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_TOKENIZE, &o, 1);
    if (prc) return prc == 1 ? 0 : 2;
    const char *src = o.pos_args[0], *prompt = o.prompt, *file = o.prompt_file;
    const int pieces = o.pieces, special = !o.no_parse_special, no_bos = o.no_bos;
    if (!src) return cli_usage_error("tokenize: MODEL_OR_TOKENIZER is required (see specdec tokenize --help)");
    if (!prompt && !file) return cli_usage_error("tokenize: give the text with -p TEXT or -f FILE");
    if (prompt && file) return cli_usage_error("tokenize: give -p or -f, not both");
    if (o.special && o.no_parse_special) return cli_usage_error("tokenize: give --special or --no-parse-special, not both");

    char path[4096];
    struct stat st;
    if (stat(src, &st) == 0) snprintf(path, sizeof path, "%s", src);
    else if (!cli_resolve_model(src, path, sizeof path)) return 1;
    char *text = NULL;
    size_t len = prompt ? strlen(prompt) : 0;
    if (file) {
        sd_status fs = sd_file_read(file, (size_t)1 << 30, &text, &len);
        if (fs != SD_OK) return cli_error_status(fs);
    }
    const char *t_in = text ? text : prompt;

    sd_tokenizer *t = NULL;
    int32_t *ids = NULL;
    char *buf = NULL;
    int rc = 0, n = 0, bos = 0;
    sd_status s = sd_tokenizer_load(path, &t);
    if (s == SD_OK) {
        bos = !no_bos && sd_tokenizer_add_bos(t);
        s = sd_tokenizer_tokenize_alloc(t, t_in, len, bos, special, &ids, &n);
    }
    if (s == SD_OK && pieces && !(buf = malloc((size_t)sd_tokenizer_max_piece_len(t))))
        s = sd_fail(SD_ERR_NOMEM, "out of memory");
    if (s != SD_OK) {
        rc = cli_error_status(s);
        goto done;
    }
    int32_t prev = -1;
    for (int i = 0; i < n; i++) {
        if (!pieces) {
            printf(i ? " %d" : "%d", (int)ids[i]);
            continue;
        }
        /* the text the token adds after its predecessor; control tokens (which print as
         * nothing) show their piece */
        size_t pl = 0;
        int k = sd_tokenizer_decode(t, prev, ids[i], buf, (size_t)sd_tokenizer_max_piece_len(t));
        const char *p = buf;
        int ty = sd_tokenizer_token_type(t, ids[i]);
        if (ty == SD_TOKEN_CONTROL || ty == SD_TOKEN_UNKNOWN || ty == SD_TOKEN_UNUSED) {
            p = sd_tokenizer_piece(t, ids[i], &pl);
        } else {
            pl = k > 0 ? (size_t)k : 0;
        }
        printf("%6d -> ", (int)ids[i]);
        print_quoted(p, pl);
        putchar('\n');
        prev = ids[i];
    }
    if (!pieces) putchar('\n');
done:
    free(buf);
    free(ids);
    free(text);
    sd_tokenizer_free(t);
    return rc;
}
