/* Constrained generation: GBNF grammars and JSON Schemas compiled to one byte-level grammar form,
 * a vocabulary index built once per tokenizer, and per-sequence matchers giving the allowed-token
 * mask, accepting tokens, rolling back over rejected drafts and reporting forced continuations.
 *
 * Objects and threads:
 *   sd_grammar_vocab    built once per tokenizer (sd_grammar_vocab_create); immutable, so one index
 *                       is shared read-only by every grammar, matcher and thread.
 *   sd_grammar          created once per request (GBNF, a JSON Schema, or the built-in any-object
 *                       grammar). Besides its rules it holds the caches its matchers fill (stack
 *                       nodes, a lazily built byte automaton, token masks per state), so a grammar
 *                       and all its matchers are used from one thread at a time. Free the matchers
 *                       before the grammar.
 *   sd_grammar_matcher  one per sequence: the state after the tokens (or bytes) accepted so far, with
 *                       the state after every earlier step kept, so rolling back is O(1).
 *
 * Semantics. A grammar is a language of byte strings. A token is allowed when its bytes (what
 * sd_tokenizer_decode prints for it) are a continuation of the text so far that the grammar can
 * still complete. Control, unknown and unused tokens, and tokens that print nothing, are never
 * allowed; the end-of-generation ids (sd_tokenizer_is_eog) are allowed exactly when the text so far
 * is a complete sentence of the grammar, and after one is accepted nothing more is. A grammar's
 * character classes and '.' match whole UTF-8 characters, so a constrained text is valid UTF-8 once
 * the grammar may end. */
#ifndef SPECDEC_GRAMMAR_H
#define SPECDEC_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/status.h"

typedef struct sd_grammar sd_grammar;
typedef struct sd_grammar_vocab sd_grammar_vocab;
typedef struct sd_grammar_matcher sd_grammar_matcher;
struct sd_tokenizer;

/* ---- grammars ---- */

/* GBNF as llama.cpp writes it: `name ::= alternatives`, '|', grouping, "literals" and [classes]
 * (ranges, ^ negation) with \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH escapes, '.', the postfixes
 * * + ? {m} {m,} {m,n} {,n}, # comments. root names the start rule (NULL: "root"). A grammar llama.cpp
 * would refuse is refused, as are left recursion, undefined and doubly defined rules, and token
 * references (<...>): SD_ERR_INVALID_ARG, the message naming line, column and what was expected.
 * buf need not be NUL-terminated. */
sd_status sd_grammar_from_gbnf(const char *buf, size_t len, const char *root, sd_grammar **out);

/* A JSON Schema (the JSON text of buf, len) compiled to a grammar of the JSON texts valid under it,
 * with bounded whitespace between tokens. What is supported and what is refused is listed in
 * docs/grammar.md; a keyword that cannot be honoured is refused (SD_ERR_UNSUPPORTED, or
 * SD_ERR_INVALID_ARG for a malformed schema) with a message naming the keyword and its JSON path,
 * e.g. `schema: .properties.n.multipleOf: unsupported keyword "multipleOf"`. */
sd_status sd_grammar_from_json_schema(const char *buf, size_t len, sd_grammar **out);

/* How a compiled schema (or the any-object grammar) spaces its JSON. */
typedef enum {
    SD_JSON_WS_BOUNDED = 0, /* between tokens: nothing, one space, or a line break and at most 20 spaces or tabs */
    SD_JSON_WS_COMPACT = 1, /* no whitespace at all: property names and punctuation become forced bytes */
} sd_json_ws;

typedef struct {
    sd_json_ws whitespace;
} sd_json_schema_params;

sd_json_schema_params sd_json_schema_default_params(void); /* bounded whitespace */

/* sd_grammar_from_json_schema with params (NULL: the defaults). */
sd_status sd_grammar_from_json_schema_ex(const char *buf, size_t len, const sd_json_schema_params *p, sd_grammar **out);

/* The GBNF text sd_grammar_from_json_schema compiles (malloc'd, NUL-terminated; the caller frees
 * it), for inspection and tests. */
sd_status sd_json_schema_to_gbnf(const char *buf, size_t len, const sd_json_schema_params *p, char **gbnf);

/* A JSON Schema placed inside a larger grammar (sd_grammar_from_gbnf_schemas). */
typedef struct {
    const char *rule;   /* the name of the rule it defines: the JSON values valid under the schema,
                           with no whitespace before or after them */
    const char *schema; /* the schema's JSON text, len bytes */
    size_t len;
} sd_grammar_schema_rule;

/* A GBNF grammar (gbnf, len; start rule root, NULL: "root") whose rules may refer to the rules
 * schemas[0..n) define, each schema compiled as sd_grammar_from_json_schema_ex compiles it (p: the
 * whitespace inside the values; NULL: bounded). Tool calls use it: fixed text around each
 * function's arguments. The compiled schemas define rules named ws, char, hex4, string, integer,
 * number, boolean, null, value, object, array, kchar, date, time, eatom, elabel, ipbyte and r<number>:
 * gbnf may use them but must not define them (a rule defined twice is refused). Errors: gbnf's as
 * sd_grammar_from_gbnf gives them (lines and columns of gbnf); a schema's as
 * sd_grammar_from_json_schema gives them, with *bad (when not NULL) set to its index (-1 for any
 * other error). */
sd_status sd_grammar_from_gbnf_schemas(const char *gbnf, size_t len, const char *root, const sd_grammar_schema_rule *schemas,
                                       int n, const sd_json_schema_params *p, int *bad, sd_grammar **out);

/* Any JSON object (OpenAI's response_format json_object), whitespace bounded as above (p NULL) or
 * as p says. */
sd_status sd_grammar_json_object(const sd_json_schema_params *p, sd_grammar **out);

void sd_grammar_free(sd_grammar *g); /* NULL is fine */

/* Where a lazy grammar's trigger may stand. */
typedef enum {
    SD_GRAMMAR_TRIGGER_ANYWHERE = 0, /* anywhere in the text */
    SD_GRAMMAR_TRIGGER_AT_START = 1, /* only after nothing but whitespace (space, tab, CR, LF) */
} sd_grammar_trigger_where;

/* Makes g lazy (tool_choice auto with strict tools): the text is free, exactly as without a grammar,
 * until the trigger's bytes (len >= 1) first appear in it where `where` allows; the grammar then
 * applies to the text from the trigger's first byte on, so g's sentences should begin with the
 * trigger. Before that, every token is allowed (control tokens and end of generation too) except one
 * that would complete the trigger with bytes the grammar refuses, so a text that starts the
 * constrained part always continues it validly. A lazy grammar's language is unbounded
 * (sd_grammar_max_bytes gives 0). Set it before the first matcher is created, at most once
 * (else SD_ERR_INVALID_ARG). */
sd_status sd_grammar_set_trigger(sd_grammar *g, const void *trigger, size_t len, sd_grammar_trigger_where where);

/* 1 and *bytes = the longest sentence in bytes when the language is finite, else 0 (a repetition
 * without an upper bound, or recursion). A finite grammar ends within *bytes + 1 tokens. */
int sd_grammar_max_bytes(const sd_grammar *g, uint64_t *bytes);

/* Rules, alternatives and elements after expansion (repetitions and classes become rules). */
void sd_grammar_size(const sd_grammar *g, int *n_rules, int *n_elements);

/* ---- the vocabulary index ---- */

/* Each token's bytes (sd_tokenizer_decode after a token that is not BOS), a byte trie over the
 * tokens a grammar may allow, and the end-of-generation ids. The tokenizer may be freed after. */
sd_status sd_grammar_vocab_create(const struct sd_tokenizer *t, sd_grammar_vocab **out);
void sd_grammar_vocab_free(sd_grammar_vocab *v); /* NULL is fine */
int sd_grammar_vocab_n(const sd_grammar_vocab *v); /* ids 0..n-1 */
/* uint64_t words of a token mask: (n + 63) / 64; bit t of word t / 64 is token t. */
size_t sd_grammar_mask_words(const sd_grammar_vocab *v);
/* The bytes the index gives token id (NULL for an id a grammar never allows as text). */
const uint8_t *sd_grammar_vocab_bytes(const sd_grammar_vocab *v, int32_t id, size_t *len);

/* ---- matchers ---- */

/* A matcher at the start of g. v may be NULL: then only the byte functions work. All matchers of
 * one grammar must use the same vocabulary index. */
sd_status sd_grammar_matcher_create(sd_grammar *g, const sd_grammar_vocab *v, sd_grammar_matcher **out);
void sd_grammar_matcher_free(sd_grammar_matcher *m); /* NULL is fine */

/* The allowed next tokens: mask has sd_grammar_mask_words(v) words, bit t set when token t is
 * allowed. Masks are cached per grammar state, so asking again in a state seen before is a copy. */
sd_status sd_grammar_matcher_mask(sd_grammar_matcher *m, uint64_t *mask);
/* Whether token id is allowed next (its bytes stepped alone: cheaper than a mask for one token). */
int sd_grammar_matcher_allows(sd_grammar_matcher *m, int32_t id);

/* Accepts token id: SD_ERR_INVALID_ARG when it is not allowed, and then nothing changes. */
sd_status sd_grammar_matcher_accept(sd_grammar_matcher *m, int32_t id);
/* Accepts len bytes as one step: all of them or (SD_ERR_INVALID_ARG) none. */
sd_status sd_grammar_matcher_accept_bytes(sd_grammar_matcher *m, const void *bytes, size_t len);

/* Steps accepted so far (tokens, and byte strings given to accept_bytes). */
int sd_grammar_matcher_n_steps(const sd_grammar_matcher *m);
/* Back to the state after the first n steps, 0 <= n <= n_steps (else SD_ERR_INVALID_ARG). O(1):
 * a speculative engine accepts its drafts, then rolls back to the verified count. */
sd_status sd_grammar_matcher_rollback(sd_grammar_matcher *m, int n);

/* 1 when the text so far is a complete sentence (end of generation is allowed). */
int sd_grammar_matcher_can_end(const sd_grammar_matcher *m);
/* 1 when nothing more is allowed: an end-of-generation token was accepted, or the grammar is
 * complete and no byte may follow. */
int sd_grammar_matcher_is_done(const sd_grammar_matcher *m);

/* The forced continuation: the bytes the grammar allows exactly one way from here (property names,
 * punctuation, const values), up to the first point with a choice or where the grammar may end.
 * Writes at most cap bytes; returns how many bytes are forced (it stops counting at cap). */
size_t sd_grammar_matcher_forced_bytes(sd_grammar_matcher *m, void *buf, size_t cap);
/* Bytes after which the text so far is a complete sentence: 0 when it already is, else their count,
 * written to buf (when not NULL). They are the shortest (first in byte order among the shortest)
 * when a search of 16k grammar states finds them; past that (deep inside nested values) they close
 * the open rules one stage at a time, each stage the shortest. -1 when none is found within cap
 * bytes or the searches' bounds, after the end of generation, in the free text before a lazy
 * grammar's trigger, or out of memory. The matcher does not move. Tests use it to close an output
 * cut by a token budget and validate it whole. */
long sd_grammar_matcher_completion(sd_grammar_matcher *m, void *buf, size_t cap);
/* The one token allowed next, when exactly one is (an end-of-generation id counts as a token);
 * else -1. Needs a vocabulary. */
int32_t sd_grammar_matcher_forced_token(sd_grammar_matcher *m);

/* logits[t] = value for every t < n whose mask bit is clear (sd_sample_probs refuses infinities,
 * so pass a large finite negative value such as -1e30f). */
void sd_grammar_mask_logits(const uint64_t *mask, float *logits, int n, float value);

#endif
