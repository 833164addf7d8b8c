/* `specdec serve`: the command around src/server: options, the models, the signals. The HTTP
 * side starts first, so /health answers 503 while the models load. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "server/server.h"

/* After the first signal, a second one exits at once. */
static void *second_signal(void *arg) {
    const sigset_t *set = arg;
    int sig;
    if (sigwait(set, &sig) == 0) {
        fprintf(stderr, "serve: second signal: exiting now\n");
        _exit(130);
    }
    return NULL;
}

/* The model id a server without --alias gives: the file's (or directory's) name, without the
 * directories before it and without .gguf or .bin, not the path it was given as. */
static const char *model_name(const char *m, char *buf, size_t cap) {
    size_t n = strlen(m);
    while (n > 1 && m[n - 1] == '/') n--;
    size_t a = n;
    while (a > 0 && m[a - 1] != '/') a--;
    size_t l = n - a;
    if (l > 5 && !strncmp(m + n - 5, ".gguf", 5)) l -= 5;
    else if (l > 4 && !strncmp(m + n - 4, ".bin", 4)) l -= 4;
    snprintf(buf, cap, "%.*s", (int)l, m + a);
    return buf;
}

int cmd_serve(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    const int pr = cli_parse(argc, argv, CMD_SERVE, &o, 0);
    if (pr) return pr == 1 ? 0 : 2;
    if (!o.model) return cli_usage_error("serve: -m MODEL is required (see specdec serve --help)");
    if (o.draft_fixed && o.p_min_set) return cli_usage_error("serve: give --draft-fixed or --draft-p-min, not both");
    if (o.ngram_min > o.ngram_max)
        return cli_usage_error("serve: --ngram-min %d exceeds --ngram-max %d", o.ngram_min, o.ngram_max);

    srv_params p = srv_default_params();
    p.host = o.host;
    p.port = o.port;
    p.parallel = o.parallel;
    p.queue_max = o.queue;
    p.timeout_s = o.timeout;
    p.request_timeout_s = o.request_timeout;
    p.max_conns = o.max_conns;
    p.buffer_limit = (size_t)o.buffer_mib << 20;
    p.cors = o.cors;
    p.health_busy = o.health_busy;
    p.api_key = o.api_key;
    char name[256];
    p.model_name = o.alias ? o.alias : model_name(o.model, name, sizeof name);
    p.special = o.special;
    p.chat_special = o.chat_special;
    cli_spec_params(&o, &p.spec);
    p.verbose = 1;

    /* Signals go to this thread only (sigwait below): every thread inherits the mask. */
    static sigset_t set; /* the watcher thread reads it after this function returns */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv *s = NULL;
    sd_status st = srv_start(&p, &s);
    if (st != SD_OK) return cli_error_status(st);
    fprintf(stderr, "serve: listening on http://%s:%d (loading %s)\n", o.host, srv_port(s), o.model);

    sd_model *tm = NULL, *dm = NULL;
    sd_chat_format chat = SD_CHAT_CHATML;
    int rc = cli_load_pair(&o, &tm, &dm);
    if (!rc) rc = cli_chat_format(sd_model_tokenizer(tm), o.chat_template, o.model, &chat);
    if (!rc && (st = srv_load(s, tm, dm, chat)) != SD_OK) rc = cli_error_status(st);
    if (rc) {
        srv_free(s);
        sd_model_free(dm);
        sd_model_free(tm);
        return rc;
    }
    fprintf(stderr, "serve: ready: %d slots, %s, drafting: %s%s%s, chat template %s\n", o.parallel, o.model,
            dm ? "draft model" : "", dm && o.ngram ? " + " : "", o.ngram ? "n-gram" : dm ? "" : "none (plain decoding)",
            sd_chat_name(chat));

    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "serve: %s: draining (at most %d s): no new requests; the running ones finish\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, second_signal, &set) == 0) pthread_detach(watcher);
    srv_shutdown(s, o.shutdown_timeout);
    srv_free(s);
    sd_model_free(dm);
    sd_model_free(tm);
    fprintf(stderr, "serve: stopped\n");
    return 0;
}
