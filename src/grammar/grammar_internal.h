/* The grammar module's internal form: a builder of rules (alternatives of byte-set terminals and
 * rule references) shared by the GBNF parser and the schema compiler, and the flat rule tables a
 * built grammar and its matchers run on. */
#ifndef SD_GRAMMAR_INTERNAL_H
#define SD_GRAMMAR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/grammar.h"

enum { GR_END = 0, GR_TERM = 1, GR_REF = 2 };

typedef struct {
    uint8_t type; /* GR_END, GR_TERM (v: byte-set index), GR_REF (v: rule index) */
    int32_t v;
} gr_elem;

typedef struct {
    uint64_t w[4];
} gr_bset;

static inline int gr_bset_has(const gr_bset *s, unsigned b) { return (int)((s->w[b >> 6] >> (b & 63)) & 1); }
static inline void gr_bset_add(gr_bset *s, unsigned b) { s->w[b >> 6] |= 1ull << (b & 63); }

/* ---- the builder ---- */
typedef struct {
    gr_elem *e;
    int n, cap;
} gr_seq;

typedef struct {
    char *name;
    gr_seq *alts;
    int n_alts, cap_alts;
    int defined;         /* by a definition (the parser), or generated */
    int chain_idx;       /* j of R_j in a bounded repetition's chain (R_j ::= e R_{j-1} | ""), 0: none */
    int ref_line, ref_col; /* first reference, for "undefined rule" */
} gr_brule;

typedef struct {
    gr_brule *rules;
    int n_rules, cap_rules;
    gr_bset *sets;
    int n_sets, cap_sets;
    long n_elems; /* total, for the size limit */
    int32_t *names;  /* hash of the named rules (generated ones are never looked up by name) */
    uint32_t names_mask;
    int n_named;
    int oom;
} gr_builder;

/* Largest grammar accepted (elements after expansion), and the repetition bound. */
#define GR_MAX_ELEMS 4000000
#define GR_MAX_REPEAT 100000

void gr_builder_free(gr_builder *b);
/* Rule index of name (created undefined when absent); -1 on allocation failure. */
int gr_rule_get(gr_builder *b, const char *name, size_t len);
/* A new generated rule named "<base>-<n>" (a unique name). */
int gr_rule_new(gr_builder *b, const char *base);
/* Starts a new alternative of rule r; returns it (valid until the next alternative of any rule). */
gr_seq *gr_alt_new(gr_builder *b, int r);
/* Appends to seq; a byte set is deduplicated into the set table. */
void gr_push_ref(gr_builder *b, gr_seq *s, int rule);
void gr_push_set(gr_builder *b, gr_seq *s, const gr_bset *set);
void gr_push_byte(gr_builder *b, gr_seq *s, uint8_t c);
/* A code point class (sorted or not, overlapping or not, ranges within 0..0x10FFFF, surrogates
 * dropped) as UTF-8: one byte-set terminal when every member is ASCII, else a reference to a
 * generated rule of byte-set sequences. negate: the complement among all scalar values. Returns
 * 0, or -1 when the class is empty (nothing can match). */
int gr_push_class(gr_builder *b, gr_seq *s, const uint32_t *ranges, int n_ranges, int negate, const char *base);
/* e{min,max} appended to s, where e is one element already built (max < 0: unbounded). */
void gr_push_repeat(gr_builder *b, gr_seq *s, gr_elem e, int min, int max, const char *base);

/* Finishes: every referenced rule defined, no left recursion, the flat tables. On failure *out is
 * NULL and the message names the rule. b is consumed (freed) either way. */
sd_status gr_build(gr_builder *b, const char *root, sd_grammar **out);

/* ---- a built grammar and its caches ---- */
typedef struct {
    int32_t pos;    /* element index: a terminal (the top of a stack) or the continuation after a call */
    int32_t parent; /* the node to return to, -1: the end of the root */
    int32_t next;   /* hash chain */
} gr_node;

typedef struct {
    int32_t off, n;   /* the stacks' top nodes (ascending) in the state pool */
    uint32_t hash;
    int32_t next;     /* hash chain */
    int32_t *trans;   /* 256 successors (-2: not computed, -1: dead), allocated on first use */
    uint64_t *mask;   /* the token mask of this state, when cached */
    uint64_t *smask;  /* as a capped key: the mask of the short tokens only */
    uint8_t accept;   /* the root may end here */
} gr_state;

struct sd_grammar {
    /* rules */
    gr_elem *el;
    int n_el;
    int32_t *alt_start, *rule_alt0, *rule_nalt;
    int n_alt, n_rules;
    int32_t *pos_alt, *alt_rule, *rule_chain; /* element -> alternative -> rule; chain index j (0: none) */
    int n_chain_rules;
    char **names;
    gr_bset *sets;
    int n_sets;
    int root;
    int finite;
    uint64_t max_bytes;
    /* hash-consed stack nodes (never freed while the grammar lives) */
    gr_node *nodes;
    int n_nodes, cap_nodes;
    int32_t *nbuck;
    uint32_t nbuck_mask;
    uint32_t *stamp, cur_stamp;
    int32_t *canon_of; /* per node: its stack with long repetition chains capped (-2: not computed) */
    int32_t *path;
    int cap_path;
    /* the lazily built automaton over sets of stacks; flushed (epoch++) when it grows too big */
    gr_state *st;
    int n_st, cap_st;
    int32_t *sbuck;
    uint32_t sbuck_mask;
    int32_t *spool;
    size_t n_spool, cap_spool;
    uint32_t epoch;
    size_t cache_bytes;
    const sd_grammar_vocab *vocab;
    int n_matchers; /* created so far: a trigger is set before the first */
    /* lazy (sd_grammar_set_trigger): the trigger, its failure links (the longest proper prefix of
     * trig[0..i] that is also its suffix) and, per trigger state 0..trig_len - 1, the cached mask of
     * the tokens allowed while the text is free */
    uint8_t *trig;
    int trig_len;
    sd_grammar_trigger_where trig_where;
    int32_t *trig_fail;
    uint64_t **free_mask;
    /* scratch */
    int32_t *work, *out;
    int cap_work, cap_out;
    int oom;
};

/* GBNF text into a builder (without building), for the schema compiler's generated text too. */
sd_status gr_parse_gbnf(gr_builder *b, const char *buf, size_t len);

#endif
