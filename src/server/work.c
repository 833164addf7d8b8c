/* The tokenizer workers: request bodies are parsed and tokenized here, off the HTTP thread (which
 * then never waits on a long prompt) and off the engine thread. The first worker takes small
 * bodies only, so that a usual request never waits behind megabyte prompts; the others take small
 * ones first and every fourth pick a large one, so that those are not starved. */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "server/internal.h"

#define SMALL_BODY ((size_t)64 << 10)

void srv_work_submit_locked(srv *s, srv_job *j) {
    srv_job **q = j->len <= SMALL_BODY ? &s->jobs_small : &s->jobs_large;
    while (*q) q = &(*q)->next;
    j->next = NULL;
    *q = j;
    s->n_jobs++;
    pthread_cond_broadcast(&s->work_cv);
}

static srv_job *take(srv *s, int small_only) {
    srv_job **q = small_only || (s->jobs_small && (!s->jobs_large || ++s->picks % 4)) ? &s->jobs_small : &s->jobs_large;
    srv_job *j = *q;
    if (j) *q = j->next;
    return j;
}

/* The job's result is in: the connection goes on (mu held). */
static void finish(srv *s, srv_job *j) {
    j->done = 1;
    s->n_jobs--;
    if (j->conn) MHD_resume_connection(j->conn);
    pthread_cond_broadcast(&s->work_cv); /* srv_shutdown waits for the last job */
}

static void run(srv *s, srv_job *j) {
    const srv_api_ctx c = srv_http_api_ctx(s);
    j->rc = 0;
    switch (j->route) {
    case SRV_ROUTE_TOKENIZE:
        j->resp = srv_tokenize_json(&c, j->body, j->len, &j->e);
        j->rc = j->resp ? 0 : -1;
        break;
    case SRV_ROUTE_DETOKENIZE:
        j->resp = srv_detokenize_json(&c, j->body, j->len, &j->e);
        j->rc = j->resp ? 0 : -1;
        break;
    default: j->rc = srv_parse_gen(&c, j->route == SRV_ROUTE_CHAT, j->body, j->len, &j->g, &j->e); break;
    }
}

static void *worker_main(void *arg) {
    srv *s = ((struct srv_worker *)arg)->s;
    const int small_only = ((struct srv_worker *)arg)->small_only;
    /* megabyte bodies yield to the engine (Linux: a thread's own nice value) */
    if (!small_only && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0) { /* not allowed: runs as it is */
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->workers_stop && !s->jobs_small && (small_only || !s->jobs_large)) pthread_cond_wait(&s->work_cv, &s->mu);
        srv_job *j = take(s, small_only);
        if (!j) break; /* stopping, and nothing it takes waits */
        pthread_mutex_unlock(&s->mu);
        run(s, j);
        pthread_mutex_lock(&s->mu);
        finish(s, j);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

sd_status srv_work_start(srv *s) {
    for (int i = 0; i < SRV_WORKERS; i++) {
        s->workers[i].s = s;
        s->workers[i].small_only = i == 0;
        if (pthread_create(&s->workers[i].t, NULL, worker_main, &s->workers[i]) != 0)
            return sd_fail(SD_ERR_NOMEM, "serve: cannot start the tokenizer threads");
        s->n_workers++;
    }
    return SD_OK;
}

void srv_work_stop(srv *s) {
    pthread_mutex_lock(&s->mu);
    s->workers_stop = 1; /* the workers take what waits, then stop */
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_workers; i++) pthread_join(s->workers[i].t, NULL);
    s->n_workers = 0;
}
