/* The prompt of `specdec generate`: -p as it is (special tokens parsed with --special) or, with
 * --chat, as one user turn (and a --system turn) rendered by the model's chat template, whose
 * markers are special while the turns' text is text (also parsed with --special). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "specdec/chat.h"

/* The format: --chat-template's, else the one the model's template is recognised as, else
 * (no template at all, as in llama2.c models) ChatML with a warning, as llama.cpp does. */
int cli_chat_format(const sd_tokenizer *t, const char *template_name, const char *model, sd_chat_format *f) {
    if (template_name) {
        if (sd_chat_format_from_name(template_name, f) != SD_OK) return cli_usage_error("%s", sd_last_error());
        return 0;
    }
    size_t len = 0;
    const char *tmpl = sd_tokenizer_chat_template(t, &len);
    if (!tmpl) {
        fprintf(stderr, "warning: %s has no chat template; using chatml (choose another with --chat-template NAME)\n",
                model);
        *f = SD_CHAT_CHATML;
        return 0;
    }
    if (sd_chat_detect(tmpl, len, f) != SD_OK) {
        fprintf(stderr, "error: %s: %s (choose one with --chat-template NAME)\n", model, sd_last_error());
        return 1;
    }
    return 0;
}

int cli_prompt_ids(const sd_tokenizer *t, const char *model, const cli_prompt_opts *o, const char *text,
                   int32_t **ids, int *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    sd_status st;
    if (o->chat) {
        sd_chat_format f;
        int rc = cli_chat_format(t, o->template_name, model, &f);
        if (rc) return rc;
        sd_chat_msg msgs[2] = {{"system", o->system, NULL, 0}, {"user", text, NULL, 0}};
        const int sys = o->system != NULL;
        sd_chat_params p = sd_chat_params_for(t);
        /* the template's refusal of these messages is a usage error, the tokenizer's a failure */
        char *rendered = NULL;
        if (sd_chat_render(f, msgs + !sys, 1 + sys, &p, &rendered, NULL) != SD_OK)
            return cli_usage_error("%s", sd_last_error());
        free(rendered);
        st = sd_chat_prompt(t, f, msgs + !sys, 1 + sys, &p, o->special, ids, n_ids);
    } else {
        st = sd_tokenizer_tokenize_alloc(t, text, strlen(text), sd_tokenizer_add_bos(t), o->special, ids, n_ids);
    }
    if (st != SD_OK) return cli_error_status(st);
    if (*n_ids == 0) return cli_usage_error("the prompt encodes to no tokens");
    return 0;
}
