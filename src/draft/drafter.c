/* What every drafter shares behind the vtable: freeing, and the generation's sampling. */
#include "specdec/draft.h"

void sd_drafter_free(sd_drafter *d) {
    if (d) d->vt->destroy(d);
}

sd_status sd_drafter_set_sampling(sd_drafter *d, const sd_sampler_params *sp) {
    if (!d) return sd_fail(SD_ERR_INVALID_ARG, "drafter: none to set sampling for");
    sd_status st = sd_sampler_params_check(sp);
    if (st == SD_OK && d->vt->set_sampling) st = d->vt->set_sampling(d, sp);
    return st;
}
