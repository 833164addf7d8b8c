/* The validity drivers' closing of an output the token budget cut (gen_outputs.c, gen_tool_calls.c). */
#ifndef SDTEST_CLOSE_CUT_H
#define SDTEST_CLOSE_CUT_H

#include <stdio.h>

#include "specdec/grammar.h"

/* Bytes a cut output may take to be closed (room the drivers keep after the generated text). */
enum { CLOSE_CAP = 4096 };

/* Appends the grammar's completion to buf[0..*blen) and steps m over it, so that the validator
 * checks the output whole: every prefix the mask allowed must extend to a valid instance.
 * Returns the bytes appended, or -1 (with a FAIL line naming schema si) when the grammar cannot
 * complete it. */
static inline long close_cut(sd_grammar_matcher *m, char *buf, size_t *blen, int si) {
    long n = sd_grammar_matcher_completion(m, buf + *blen, CLOSE_CAP);
    if (n < 0 || sd_grammar_matcher_accept_bytes(m, buf + *blen, (size_t)n) != SD_OK || !sd_grammar_matcher_can_end(m)) {
        fprintf(stderr, "FAIL: schema %d: a cut output cannot be completed (%ld)\n", si, n);
        return -1;
    }
    *blen += (size_t)n;
    return n;
}

#endif
