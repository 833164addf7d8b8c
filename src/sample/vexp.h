/* The vectorised softmax numerators shared by the sampling pipeline (vexp.c). */
#ifndef SD_SAMPLE_VEXP_H
#define SD_SAMPLE_VEXP_H

/* out[i] = exp((x[i] - mx) / t) for n values <= mx (within 2 ulp of expf; 0 below exp(-87.3));
 * returns their sum, accumulated in double. */
double sd_softmax_numerators(const float *x, int n, float mx, float t, float *out);

#endif
