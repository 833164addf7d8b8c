/* Hugging Face tokenizer.json with model.type "BPE": vocabulary, merges and added tokens,
 * and the normalizer / pre-tokenizer / decoder / post-processor pieces bpe.c implements. */
#include "core/io.h"
#include "core/json.h"
#include "tok_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char ESC_SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* Integer-valued JSON number in [0, SD_TOK_MAX_VOCAB), else -1. */
static int32_t json_id(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < SD_TOK_MAX_VOCAB) || d != (double)(int32_t)d) return -1;
    return (int32_t)d;
}

typedef struct {
    const char *what;
    sd_tokenizer *t;
    const char **piece; /* [n_vocab] text of each id (NULL: a gap) */
} hf_ctx;

/* ---- normalizer, pre-tokenizer, decoder ---------------------------------------------- */

static sd_status parse_normalizer(hf_ctx *c, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return SD_OK;
    const char *type = jstr(n, "type");
    if (!type) return sd_fail(SD_ERR_FORMAT, "%s: normalizer has no \"type\"", c->what);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) {
            sd_status st = parse_normalizer(c, e);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *p = jstr(n, "prepend");
        if (!p || strcmp(p, ESC_SPACE) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: normalizer Prepend of \"%s\" (only \"\xe2\x96\x81\" is supported)",
                           c->what, p ? p : "?");
        c->t->add_space_prefix = 1;
        return SD_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        const char *from = jstr(cJSON_GetObjectItemCaseSensitive(n, "pattern"), "String");
        const char *to = jstr(n, "content");
        if (!from || !to || strcmp(from, " ") != 0 || strcmp(to, ESC_SPACE) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED,
                           "%s: normalizer Replace of \"%s\" by \"%s\" (only \" \" by \"\xe2\x96\x81\" is supported)",
                           c->what, from ? from : "?", to ? to : "?");
        c->t->escape_spaces = 1;
        return SD_OK;
    }
    /* NFC changes only text that is not already composed; llama.cpp skips it too. */
    if (strcmp(type, "NFC") == 0) return SD_OK;
    return sd_fail(SD_ERR_UNSUPPORTED, "%s: normalizer type \"%s\" is not supported", c->what, type);
}

static sd_status parse_pre(hf_ctx *c, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return SD_OK;
    sd_tokenizer *t = c->t;
    const char *type = jstr(p, "type");
    if (!type) return sd_fail(SD_ERR_FORMAT, "%s: pre_tokenizer has no \"type\"", c->what);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) {
            sd_status st = parse_pre(c, e);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        t->byte_level = 1;
        t->bl_prefix = jbool(p, "add_prefix_space", 1);
        static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
        if (jbool(p, "use_regex", 1) && sd_bpe_pre_from_regex(t, gpt2) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: too many pre-tokenizer steps", c->what);
        return SD_OK;
    }
    if (strcmp(type, "Metaspace") == 0) { /* the newer SentencePiece-style tokenizer.json */
        const char *rep = jstr(p, "replacement");
        const char *scheme = jstr(p, "prepend_scheme");
        if (!scheme) scheme = jbool(p, "add_prefix_space", 1) ? "always" : "never";
        if (!rep || strcmp(rep, ESC_SPACE) != 0 ||
            (strcmp(scheme, "always") != 0 && strcmp(scheme, "first") != 0 && strcmp(scheme, "never") != 0))
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: pre-tokenizer Metaspace with replacement \"%s\", prepend_scheme \"%s\"",
                           c->what, rep ? rep : "?", scheme);
        t->escape_spaces = 1;
        t->add_space_prefix = strcmp(scheme, "never") != 0;
        t->prefix_first = strcmp(scheme, "first") == 0;
        t->prefix_missing = 1;
        if (jbool(p, "split", 1)) {
            if (t->n_pre >= (int)sizeof t->pre)
                return sd_fail(SD_ERR_UNSUPPORTED, "%s: too many pre-tokenizer steps", c->what);
            t->pre[t->n_pre++] = SD_PRE_METASPACE;
        }
        return SD_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        const char *re = jbool(p, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+";
        if (sd_bpe_pre_from_regex(t, re) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: too many pre-tokenizer steps", c->what);
        return SD_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const char *re = jstr(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
        const char *behavior = jstr(p, "behavior");
        if (!re)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: pre-tokenizer Split without a \"Regex\" pattern is not supported",
                           c->what);
        if (!behavior || strcmp(behavior, "Isolated") != 0 || jbool(p, "invert", 0))
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: pre-tokenizer Split with behavior \"%s\"%s (only Isolated)",
                           c->what, behavior ? behavior : "?", jbool(p, "invert", 0) ? ", inverted" : "");
        if (sd_bpe_pre_from_regex(t, re) != 0) {
            char q[160];
            return sd_fail(SD_ERR_UNSUPPORTED,
                           "%s: pre-tokenizer Split regex %s is not one specdec implements (gpt2, llama3, "
                           "qwen2, deepseek-coder patterns)",
                           c->what, sd_tok_quote(re, strlen(re), q, sizeof q));
        }
        return SD_OK;
    }
    return sd_fail(SD_ERR_UNSUPPORTED, "%s: pre_tokenizer type \"%s\" is not supported", c->what, type);
}

/* Decoding follows from the pieces (byte-level or "▁" text with byte fallback); the decoder
 * is only checked to be one of the combinations that means exactly that. */
static sd_status check_decoder(hf_ctx *c, const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return SD_OK;
    const char *type = jstr(d, "type");
    if (!type) return sd_fail(SD_ERR_FORMAT, "%s: decoder has no \"type\"", c->what);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "decoders")) {
            sd_status st = check_decoder(c, e);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    int bl = strcmp(type, "ByteLevel") == 0;
    if (bl != (c->t->byte_level != 0) && (bl || strcmp(type, "ByteFallback") == 0 || strcmp(type, "Replace") == 0))
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: decoder %s does not match a %s pre-tokenizer", c->what, type,
                       c->t->byte_level ? "byte-level" : "non-byte-level");
    if (bl || strcmp(type, "ByteFallback") == 0 || strcmp(type, "Fuse") == 0 || strcmp(type, "Strip") == 0)
        return SD_OK;
    if (strcmp(type, "Metaspace") == 0 && !c->t->byte_level) return SD_OK;
    if (strcmp(type, "Replace") == 0) {
        const char *from = jstr(cJSON_GetObjectItemCaseSensitive(d, "pattern"), "String");
        const char *to = jstr(d, "content");
        if (from && to && strcmp(from, ESC_SPACE) == 0 && strcmp(to, " ") == 0) return SD_OK;
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: decoder Replace of \"%s\" by \"%s\" is not supported", c->what,
                       from ? from : "?", to ? to : "?");
    }
    return sd_fail(SD_ERR_UNSUPPORTED, "%s: decoder type \"%s\" is not supported", c->what, type);
}

/* BOS from a TemplateProcessing whose single-sequence template starts with a special token
 * (Llama's "<s> $A"); -1 when the post-processor adds nothing in front. */
static sd_status template_bos(hf_ctx *c, const cJSON *pp, int32_t *bos) {
    if (!pp || cJSON_IsNull(pp)) return SD_OK;
    const char *type = jstr(pp, "type");
    if (!type) return sd_fail(SD_ERR_FORMAT, "%s: post_processor has no \"type\"", c->what);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            sd_status st = template_bos(c, e, bos);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) return SD_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") != 0)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: post_processor type \"%s\" is not supported", c->what, type);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
    if (!sp) return SD_OK;
    const char *name = jstr(sp, "id");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(specials, name ? name : "");
    int32_t id = json_id(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(entry, "ids"), 0));
    if (id < 0 && name) id = sd_tok_lookup(c->t, name, strlen(name));
    if (id < 0 || id >= c->t->n_vocab)
        return sd_fail(SD_ERR_FORMAT, "%s: post_processor template starts with special token \"%s\", which has no id",
                       c->what, name ? name : "?");
    *bos = id;
    return SD_OK;
}

/* ---- loading --------------------------------------------------------------------------- */

static sd_status load_vocab(hf_ctx *c, const cJSON *model, const cJSON *added, int *n_vocab) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return sd_fail(SD_ERR_FORMAT, "%s: model.vocab is missing or not an object", c->what);
    int32_t max_id = -1;
    int64_t named = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = json_id(e);
        if (id < 0)
            return sd_fail(SD_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not an id in 0..%d", c->what,
                           e->string ? e->string : "", SD_TOK_MAX_VOCAB - 1);
        if (id > max_id) max_id = id;
        named++;
    }
    if (added && !cJSON_IsArray(added)) return sd_fail(SD_ERR_FORMAT, "%s: added_tokens is not an array", c->what);
    cJSON_ArrayForEach(e, added) {
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        if (id < 0 || !jstr(e, "content"))
            return sd_fail(SD_ERR_FORMAT, "%s: added_tokens entry without a valid id and content", c->what);
        if (id > max_id) max_id = id;
        named++;
    }
    if (max_id < 0) return sd_fail(SD_ERR_FORMAT, "%s: empty vocabulary", c->what);
    /* Unnamed ids become padding pieces; a few bytes of JSON naming id 16777215 must not
     * build a 16M-piece vocabulary (a gigabyte and seconds), so gaps are bounded. */
    if ((int64_t)max_id >= 2 * named + 65536)
        return sd_fail(SD_ERR_FORMAT, "%s: ids reach %d but only %lld tokens are named (a vocabulary of mostly gaps)",
                       c->what, (int)max_id, (long long)named);
    *n_vocab = max_id + 1;
    c->piece = calloc((size_t)*n_vocab, sizeof *c->piece);
    if (!c->piece) return sd_fail(SD_ERR_NOMEM, "%s: out of memory", c->what);
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = json_id(e);
        if (c->piece[id])
            return sd_fail(SD_ERR_FORMAT, "%s: model.vocab gives id %d to both \"%.40s\" and \"%.40s\"", c->what,
                           (int)id, c->piece[id], e->string ? e->string : "");
        c->piece[id] = e->string ? e->string : "";
    }
    return SD_OK;
}

static sd_status load_merges(hf_ctx *c, const cJSON *merges) {
    sd_tokenizer *t = c->t;
    if (!cJSON_IsArray(merges)) return sd_fail(SD_ERR_FORMAT, "%s: model.merges is missing or not an array", c->what);
    sd_status st = sd_bpe_merges_alloc(t, (size_t)cJSON_GetArraySize(merges), c->what);
    if (st != SD_OK) return st;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (cJSON_IsString(m)) { /* "left right", split at the first space after the first byte */
            const char *s = m->valuestring;
            const char *sp = s[0] ? strchr(s + 1, ' ') : NULL;
            if (sp) {
                a = s;
                na = (size_t)(sp - s);
                b = sp + 1;
                nb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) { /* the newer ["left", "right"] */
            const cJSON *l = cJSON_GetArrayItem(m, 0), *r = cJSON_GetArrayItem(m, 1);
            if (cJSON_IsString(l) && cJSON_IsString(r)) {
                a = l->valuestring;
                na = strlen(a);
                b = r->valuestring;
                nb = strlen(b);
            }
        }
        if (!a) return sd_fail(SD_ERR_FORMAT, "%s: model.merges[%d] is not \"left right\" or [left, right]", c->what, i);
        sd_bpe_merge_add(t, a, na, b, nb);
        i++;
    }
    return SD_OK;
}

static sd_status from_json(hf_ctx *c, const cJSON *root, int32_t bos, int32_t eos, sd_tokenizer **out) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return sd_fail(SD_ERR_FORMAT, "%s: no \"model\" object", c->what);
    const char *type = jstr(model, "type");
    if (!type) return sd_fail(SD_ERR_FORMAT, "%s: model.type is missing", c->what);
    if (strcmp(type, "BPE") != 0)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: model.type is \"%s\"; only \"BPE\" is supported", c->what, type);
    const char *cont = jstr(model, "continuing_subword_prefix"), *suffix = jstr(model, "end_of_word_suffix");
    if ((cont && cont[0]) || (suffix && suffix[0]))
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: BPE with continuing_subword_prefix/end_of_word_suffix is not supported",
                       c->what);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: BPE dropout %g is not supported (encoding is deterministic)", c->what,
                       dropout->valuedouble);

    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int n_vocab = 0;
    sd_status st = load_vocab(c, model, cJSON_IsNull(added) ? NULL : added, &n_vocab);
    if (st != SD_OK) return st;
    const int byte_fallback = jbool(model, "byte_fallback", 0);

    /* Added tokens replace what the vocabulary says for their id. */
    uint8_t *atype = calloc((size_t)n_vocab, 1);
    if (!atype) return sd_fail(SD_ERR_NOMEM, "%s: out of memory", c->what);
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        c->piece[id] = jstr(e, "content");
        atype[id] = jbool(e, "special", 0) ? SD_TOKEN_CONTROL : SD_TOKEN_USER_DEFINED;
    }
    size_t text_bytes = 0;
    for (int i = 0; i < n_vocab; i++) text_bytes += c->piece[i] ? strlen(c->piece[i]) : 16;

    st = sd_tok_alloc(n_vocab, text_bytes, c->what, &c->t);
    if (st != SD_OK) {
        free(atype);
        return st;
    }
    sd_tokenizer *t = c->t;
    const char *unk = jstr(model, "unk_token");
    for (int32_t id = 0; id < n_vocab; id++) {
        char pad[24];
        const char *p = c->piece[id];
        int ty = atype[id] ? atype[id] : SD_TOKEN_NORMAL;
        if (!p) { /* ids nothing names: placeholders, as llama.cpp's converter writes them */
            snprintf(pad, sizeof pad, "[PAD%d]", (int)id);
            p = pad;
            ty = SD_TOKEN_UNUSED;
        } else if (unk && strcmp(p, unk) == 0) {
            t->unk = id;
            ty = SD_TOKEN_UNKNOWN;
        } else if (ty == SD_TOKEN_NORMAL && byte_fallback && sd_tok_byte_value(p, strlen(p)) >= 0) {
            ty = SD_TOKEN_BYTE;
        }
        if (sd_tok_add_piece(t, id, p, strlen(p), 0.0f, ty) != 0) {
            free(atype);
            return sd_fail(SD_ERR_FORMAT, "%s: token text store overflow at id %d", c->what, (int)id);
        }
    }
    free(atype);
    if (unk && t->unk < 0)
        return sd_fail(SD_ERR_FORMAT, "%s: model.unk_token \"%.40s\" is not in the vocabulary", c->what, unk);

    /* HF BPE: no SentencePiece prefix unless the normalizer prepends one. */
    t->add_space_prefix = 0;
    t->add_bos = 0;
    t->byte_fallback = byte_fallback;
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    if ((st = sd_tok_finish(t, c->what)) != SD_OK) return st;
    if ((st = parse_normalizer(c, cJSON_GetObjectItemCaseSensitive(root, "normalizer"))) != SD_OK) return st;
    if ((st = parse_pre(c, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"))) != SD_OK) return st;
    if ((st = check_decoder(c, cJSON_GetObjectItemCaseSensitive(root, "decoder"))) != SD_OK) return st;
    if (t->byte_level && (t->add_space_prefix || t->escape_spaces))
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "%s: a \"\xe2\x96\x81\" normalizer with a byte-level pre-tokenizer is not supported", c->what);
    int32_t tbos = -1;
    if ((st = template_bos(c, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), &tbos)) != SD_OK) return st;
    t->add_bos = tbos >= 0;
    t->bos = tbos >= 0 ? tbos : bos;
    t->eos = eos;
    if (t->bos >= n_vocab || t->eos >= n_vocab)
        return sd_fail(SD_ERR_FORMAT, "%s: BOS %d / EOS %d outside the vocabulary of %d", c->what, (int)t->bos,
                       (int)t->eos, n_vocab);
    if ((st = load_merges(c, cJSON_GetObjectItemCaseSensitive(model, "merges"))) != SD_OK) return st;
    if ((st = sd_bpe_finish(t, c->what)) != SD_OK) return st;
    if ((st = sd_tok_finish_special(t, NULL, c->what)) != SD_OK) return st;
    *out = t;
    c->t = NULL;
    return SD_OK;
}

sd_status sd_tokenizer_from_hf_json(const char *json, size_t len, const char *what, int32_t bos,
                                    int32_t eos, sd_tokenizer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (!what) what = "tokenizer.json";
    if (!json) return sd_fail(SD_ERR_INVALID_ARG, "%s: NULL buffer", what);
    if (bos < -1 || eos < -1) return sd_fail(SD_ERR_INVALID_ARG, "%s: BOS %d / EOS %d", what, (int)bos, (int)eos);
    cJSON *root = NULL;
    sd_status pst = sd_json_parse(json, len, what, &root);
    if (pst != SD_OK) return pst;
    hf_ctx c = {what, NULL, NULL};
    sd_status st = from_json(&c, root, bos, eos, out);
    sd_tokenizer_free(c.t);
    free(c.piece);
    cJSON_Delete(root);
    return st;
}

sd_status sd_tokenizer_load_hf_json(const char *path, int32_t bos, int32_t eos, sd_tokenizer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (!path) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: path is NULL");
    char *buf;
    size_t len;
    sd_status st = sd_file_read(path, (size_t)1 << 30, &buf, &len);
    if (st == SD_OK) st = sd_tokenizer_from_hf_json(buf, len, path, bos, eos, out);
    free(buf);
    return st;
}

/* ---- files beside tokenizer.json ------------------------------------------------------- */

/* An eos_token_id entry: an integer id of this vocabulary, else -1 with the error set. */
static int32_t config_id(const sd_tokenizer *t, const cJSON *v, const char *what, const char *where) {
    int32_t id = json_id(v);
    if (id >= 0 && id < t->n_vocab) return id;
    if (cJSON_IsNumber(v))
        sd_fail(SD_ERR_FORMAT, "%s: %s = %g is not a token id (vocabulary of %d)", what, where, v->valuedouble,
                t->n_vocab);
    else
        sd_fail(SD_ERR_FORMAT, "%s: %s is not a token id", what, where);
    return -1;
}

sd_status sd_tokenizer_apply_hf_config(sd_tokenizer *t, const char *json, size_t len, const char *what) {
    if (!what) what = "tokenizer config";
    if (!t || (!json && len)) return sd_fail(SD_ERR_INVALID_ARG, "%s: bad arguments", what);
    cJSON *root = NULL;
    sd_status pst = sd_json_parse(json ? json : "", len, what, &root);
    if (pst != SD_OK) return pst;
    if (!cJSON_IsObject(root)) {
        sd_json_ctx jc = sd_json_ctx_make(what, SD_ERR_FORMAT, 0);
        pst = sd_json_expected(&jc, "an object", root);
        cJSON_Delete(root);
        return pst;
    }
    /* Everything is checked before t changes. */
    enum { MAX_EOS = 64 };
    int32_t ids[MAX_EOS + 1];
    int n_ids = 0;
    const char *tmpl = NULL;
    sd_status st = SD_OK;
    const cJSON *eid = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (cJSON_IsArray(eid)) {
        if (cJSON_GetArraySize(eid) > MAX_EOS) {
            st = sd_fail(SD_ERR_FORMAT, "%s: eos_token_id lists %d ids (at most %d)", what, cJSON_GetArraySize(eid),
                         MAX_EOS);
            goto out;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, eid) {
            char where[40];
            snprintf(where, sizeof where, "eos_token_id[%d]", n_ids);
            if ((ids[n_ids++] = config_id(t, e, what, where)) < 0) {
                st = SD_ERR_FORMAT;
                goto out;
            }
        }
    } else if (eid && !cJSON_IsNull(eid) && (ids[n_ids++] = config_id(t, eid, what, "eos_token_id")) < 0) {
        st = SD_ERR_FORMAT;
        goto out;
    }
    const int n_eos_ids = n_ids; /* the first of them becomes EOS when the tokenizer has none */
    int32_t bos = -1;
    const cJSON *bid = cJSON_GetObjectItemCaseSensitive(root, "bos_token_id");
    if (bid && !cJSON_IsNull(bid) && (bos = config_id(t, bid, what, "bos_token_id")) < 0) {
        st = SD_ERR_FORMAT;
        goto out;
    }
    const cJSON *etok = cJSON_GetObjectItemCaseSensitive(root, "eos_token");
    if (cJSON_IsObject(etok)) etok = cJSON_GetObjectItemCaseSensitive(etok, "content");
    if (etok && !cJSON_IsNull(etok)) {
        int32_t id = cJSON_IsString(etok) ? sd_tok_lookup(t, etok->valuestring, strlen(etok->valuestring)) : -1;
        if (id < 0) {
            char q[96];
            st = cJSON_IsString(etok) ? sd_fail(SD_ERR_FORMAT, "%s: eos_token %s is not a token of the vocabulary", what,
                                                sd_tok_quote(etok->valuestring, strlen(etok->valuestring), q, sizeof q))
                                      : sd_fail(SD_ERR_FORMAT, "%s: eos_token is not a string", what);
            goto out;
        }
        ids[n_ids++] = id;
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(ct)) {
        tmpl = ct->valuestring;
    } else if (cJSON_IsArray(ct)) { /* named templates: HF uses "default" */
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const char *name = jstr(e, "name"), *body = jstr(e, "template");
            if (!name || !body) {
                st = sd_fail(SD_ERR_FORMAT, "%s: chat_template list entries need \"name\" and \"template\" strings", what);
                goto out;
            }
            if (!strcmp(name, "default")) tmpl = body;
        }
    } else if (ct && !cJSON_IsNull(ct)) {
        st = sd_fail(SD_ERR_FORMAT, "%s: chat_template is neither a string nor a list of named templates", what);
        goto out;
    }
    if (tmpl && (st = sd_tok_set_chat_template(t, tmpl, strlen(tmpl), what)) != SD_OK) goto out;
    for (int i = 0; st == SD_OK && i < n_ids; i++) st = sd_tok_add_eog(t, ids[i], what);
    if (st == SD_OK && t->eos < 0 && n_eos_ids > 0) t->eos = ids[0];
    if (st == SD_OK && t->bos < 0 && bos >= 0) t->bos = bos;
out:
    cJSON_Delete(root);
    return st;
}

sd_status sd_tokenizer_load_hf_config(sd_tokenizer *t, const char *dir) {
    static const char *const names[] = {"generation_config.json", "tokenizer_config.json"};
    if (!t || !dir) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer config: NULL argument");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path)
            return sd_fail(SD_ERR_INVALID_ARG, "%s: path too long", dir);
        if (access(path, F_OK) != 0) continue; /* optional */
        char *buf;
        size_t len;
        sd_status st = sd_file_read(path, (size_t)1 << 30, &buf, &len);
        if (st == SD_OK) st = sd_tokenizer_apply_hf_config(t, buf, len, path);
        free(buf);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}
