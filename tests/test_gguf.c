/* GGUF parser and writer: round trips, one hostile input per check the parser makes, every
 * truncation and single-byte corruption of a small file, and the real model/vocab files. */
#include "sdtest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "specdec/gguf.h"
#include "specdec/types.h"

/* ------------------------------------------------------------------ byte builder */

/* Hand-assembles GGUF images, for the value types and malformations the writer cannot produce. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_le(bb *b, uint64_t v, size_t n) {
    uint8_t t[8];
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, t, n);
}

static void bb_u32(bb *b, uint32_t v) { bb_le(b, v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_le(b, v, 8); }

static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}

static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_u32(b, SD_GGUF_MAGIC);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

static void bb_kv_u32(bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, SD_GGUF_UINT32);
    bb_u32(b, v);
}

static void bb_pad(bb *b, size_t align) {
    static const uint8_t z[64];
    while (b->n % align) bb_put(b, z, 1);
}

/* One tensor info record. */
static void bb_tinfo(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* A file with one tensor "t" at `off`: 64 bytes of header and info, then 64 zero bytes of data. */
static void bb_one_tensor(bb *b, uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t off) {
    bb_header(b, 3, 1, 0);
    bb_tinfo(b, "t", n_dims, ne, type, off);
    bb_pad(b, 32);
    static const uint8_t z[64];
    bb_put(b, z, sizeof z);
}

/* Parses an exact-size copy (so ASan sees any read past the end) and expects failure. */
static void expect_fail(const void *buf, size_t len, sd_status want, const char *msg_part) {
    void *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, buf, len);
    sd_gguf *g = (sd_gguf *)&g; /* must be reset to NULL */
    sd_clear_error();
    sd_status st = sd_gguf_parse(len ? copy : NULL, len, "x.gguf", &g);
    if (st != want || !strstr(sd_last_error(), msg_part) || !strstr(sd_last_error(), "x.gguf"))
        print_error("status %d (%s), message '%s'; wanted %d and '%s'\n", st, sd_status_str(st), sd_last_error(), want,
                    msg_part);
    assert_int_equal(st, want);
    assert_null(g);
    assert_non_null(strstr(sd_last_error(), "x.gguf"));
    assert_non_null(strstr(sd_last_error(), msg_part));
    free(copy);
}

static void expect_fail_bb(bb *b, sd_status want, const char *msg_part) {
    expect_fail(b->p, b->n, want, msg_part);
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ------------------------------------------------------------------ writer -> parser */

static void test_roundtrip_scalars(void **state) {
    (void)state;
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(sd_gguf_set_u32(w, "a.u32", 4000000000u), SD_OK);
    assert_int_equal(sd_gguf_set_i32(w, "a.i32", -123456), SD_OK);
    assert_int_equal(sd_gguf_set_f32(w, "a.f32", 1e-5f), SD_OK);
    assert_int_equal(sd_gguf_set_bool(w, "a.true", 7), SD_OK);
    assert_int_equal(sd_gguf_set_bool(w, "a.false", 0), SD_OK);
    assert_int_equal(sd_gguf_set_str(w, "a.str", "llama \xe2\x96\x81x"), SD_OK);
    assert_int_equal(sd_gguf_set_str(w, "a.empty", ""), SD_OK);
    /* Overriding keeps the original position. */
    assert_int_equal(sd_gguf_set_u32(w, "a.i32", 5), SD_OK);
    void *buf;
    size_t len;
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    sd_gguf_writer_free(w);

    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "mem", &g), SD_OK);
    assert_int_equal(sd_gguf_version(g), 3);
    assert_int_equal(sd_gguf_alignment(g), 32);
    assert_int_equal(sd_gguf_n_kv(g), 7);
    assert_int_equal(sd_gguf_n_tensors(g), 0);
    const char *order[] = {"a.u32", "a.i32", "a.f32", "a.true", "a.false", "a.str", "a.empty"};
    for (int i = 0; i < 7; i++) assert_true(sd_str_eq(sd_gguf_kv_at(g, i)->key, order[i]));
    assert_null(sd_gguf_kv_at(g, 7));
    assert_null(sd_gguf_kv_at(g, -1));

    assert_int_equal(sd_gguf_find_kv(g, "a.u32")->type, SD_GGUF_UINT32);
    assert_int_equal(sd_gguf_find_kv(g, "a.u32")->v.u64, 4000000000u);
    assert_int_equal(sd_gguf_find_kv(g, "a.i32")->type, SD_GGUF_UINT32);
    assert_int_equal(sd_gguf_find_kv(g, "a.i32")->v.u64, 5);
    assert_int_equal(sd_gguf_find_kv(g, "a.f32")->type, SD_GGUF_FLOAT32);
    assert_true(sd_gguf_find_kv(g, "a.f32")->v.f64 == (double)1e-5f);
    assert_int_equal(sd_gguf_find_kv(g, "a.true")->v.u64, 1);
    assert_null(sd_gguf_find_kv(g, "a.missing"));
    assert_null(sd_gguf_find_kv(g, "a.u3")); /* prefixes do not match */

    uint32_t u;
    float f;
    int bl;
    sd_str s;
    assert_int_equal(sd_gguf_get_u32(g, "a.u32", &u), SD_OK);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(sd_gguf_get_f32(g, "a.f32", &f), SD_OK);
    assert_true(f == 1e-5f);
    assert_int_equal(sd_gguf_get_bool(g, "a.true", &bl), SD_OK);
    assert_int_equal(bl, 1);
    assert_int_equal(sd_gguf_get_bool(g, "a.false", &bl), SD_OK);
    assert_int_equal(bl, 0);
    assert_int_equal(sd_gguf_get_str(g, "a.str", &s), SD_OK);
    assert_true(sd_str_eq(s, "llama \xe2\x96\x81x"));
    assert_int_equal(sd_gguf_get_str(g, "a.empty", &s), SD_OK);
    assert_int_equal(s.len, 0);

    /* Getter failures name the source, the key and the problem. */
    assert_int_equal(sd_gguf_get_u32(g, "a.nope", &u), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "mem: missing key a.nope"));
    assert_int_equal(sd_gguf_get_u32(g, "a.str", &u), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "a.str has type string"));
    assert_int_equal(sd_gguf_get_f32(g, "a.u32", &f), SD_ERR_FORMAT);
    assert_int_equal(sd_gguf_get_str(g, "a.u32", &s), SD_ERR_FORMAT);
    assert_int_equal(sd_gguf_get_bool(g, "a.u32", &bl), SD_ERR_FORMAT);
    const sd_gguf_kv *kv;
    assert_int_equal(sd_gguf_get_arr(g, "a.u32", SD_GGUF_INT32, &kv), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "expected array of int32"));
    sd_gguf_free(g);
    free(buf);
}

/* The integer widths and float64 the writer has no setter for, assembled by hand. */
static void test_parse_all_scalar_types(void **state) {
    (void)state;
    bb b = {0};
    bb_header(&b, 2, 0, 8);
    bb_str(&b, "u8"), bb_u32(&b, SD_GGUF_UINT8), bb_le(&b, 200, 1);
    bb_str(&b, "i8"), bb_u32(&b, SD_GGUF_INT8), bb_le(&b, 0xfb, 1);
    bb_str(&b, "u16"), bb_u32(&b, SD_GGUF_UINT16), bb_le(&b, 65000, 2);
    bb_str(&b, "i16"), bb_u32(&b, SD_GGUF_INT16), bb_le(&b, (uint16_t)-300, 2);
    bb_str(&b, "u64"), bb_u32(&b, SD_GGUF_UINT64), bb_u64(&b, 1ull << 40);
    bb_str(&b, "i64"), bb_u32(&b, SD_GGUF_INT64), bb_u64(&b, (uint64_t)-7);
    double d = -2.5e300;
    uint64_t dbits;
    memcpy(&dbits, &d, 8);
    bb_str(&b, "f64"), bb_u32(&b, SD_GGUF_FLOAT64), bb_u64(&b, dbits);
    bb_str(&b, "i64pos"), bb_u32(&b, SD_GGUF_INT64), bb_u64(&b, 77);

    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(b.p, b.n, "hand", &g), SD_OK);
    assert_int_equal(sd_gguf_version(g), 2);
    assert_int_equal(sd_gguf_find_kv(g, "u8")->v.u64, 200);
    assert_int_equal(sd_gguf_find_kv(g, "i8")->v.i64, -5);
    assert_int_equal(sd_gguf_find_kv(g, "u16")->v.u64, 65000);
    assert_int_equal(sd_gguf_find_kv(g, "i16")->v.i64, -300);
    assert_int_equal(sd_gguf_find_kv(g, "u64")->v.u64, 1ull << 40);
    assert_int_equal(sd_gguf_find_kv(g, "i64")->v.i64, -7);
    assert_true(sd_gguf_find_kv(g, "f64")->v.f64 == d);
    uint32_t u;
    float f;
    assert_int_equal(sd_gguf_get_u32(g, "u8", &u), SD_OK);
    assert_int_equal(u, 200);
    assert_int_equal(sd_gguf_get_u32(g, "i64pos", &u), SD_OK);
    assert_int_equal(u, 77);
    assert_int_equal(sd_gguf_get_u32(g, "i8", &u), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "i8 = -5 does not fit in uint32"));
    assert_int_equal(sd_gguf_get_u32(g, "u64", &u), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "u64 = 1099511627776 does not fit"));
    assert_int_equal(sd_gguf_get_f32(g, "f64", &f), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "does not fit in float32"));
    sd_gguf_free(g);
    free(b.p);
}

static void test_roundtrip_arrays(void **state) {
    (void)state;
    sd_gguf_writer *w = sd_gguf_writer_create();
    const char *strs[] = {"<unk>", "", "\xe2\x96\x81the", "<0x0A>"};
    const float fs[] = {0.0f, -1.5f, 3.25f};
    const int32_t is[] = {1, -2, 2147483647, -2147483647 - 1};
    assert_int_equal(sd_gguf_set_arr_str(w, "s", strs, 4), SD_OK);
    assert_int_equal(sd_gguf_set_arr_f32(w, "f", fs, 3), SD_OK);
    assert_int_equal(sd_gguf_set_arr_i32(w, "i", is, 4), SD_OK);
    assert_int_equal(sd_gguf_set_arr_str(w, "s0", NULL, 0), SD_OK);
    assert_int_equal(sd_gguf_set_arr_f32(w, "f0", NULL, 0), SD_OK);
    assert_int_equal(sd_gguf_set_arr_f32(w, "bad", NULL, 3), SD_ERR_INVALID_ARG);
    const char *with_null[] = {"a", NULL};
    assert_int_equal(sd_gguf_set_arr_str(w, "bad", with_null, 2), SD_ERR_INVALID_ARG);
    void *buf;
    size_t len;
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    sd_gguf_writer_free(w);

    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "mem", &g), SD_OK);
    assert_int_equal(sd_gguf_n_kv(g), 5);
    const sd_gguf_kv *kv;
    assert_int_equal(sd_gguf_get_arr(g, "s", SD_GGUF_STRING, &kv), SD_OK);
    assert_int_equal(kv->arr_n, 4);
    for (int i = 0; i < 4; i++) assert_true(sd_str_eq(kv->arr_strs[i], strs[i]));
    assert_int_equal(sd_gguf_get_arr(g, "f", SD_GGUF_FLOAT32, &kv), SD_OK);
    assert_int_equal(kv->arr_n, 3);
    for (int i = 0; i < 3; i++) {
        float x;
        memcpy(&x, kv->arr_data + 4 * i, 4);
        assert_true(x == fs[i]);
    }
    assert_int_equal(sd_gguf_get_arr(g, "i", SD_GGUF_INT32, &kv), SD_OK);
    for (int i = 0; i < 4; i++) {
        int32_t x;
        memcpy(&x, kv->arr_data + 4 * i, 4);
        assert_int_equal(x, is[i]);
    }
    assert_int_equal(sd_gguf_get_arr(g, "s0", SD_GGUF_STRING, &kv), SD_OK);
    assert_int_equal(kv->arr_n, 0);
    assert_int_equal(sd_gguf_get_arr(g, "f0", SD_GGUF_FLOAT32, &kv), SD_OK);
    assert_int_equal(kv->arr_n, 0);
    assert_int_equal(sd_gguf_get_arr(g, "f", SD_GGUF_INT32, &kv), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "mem: key f is an array of float32, expected array of int32"));
    sd_gguf_free(g);
    free(buf);
}

/* Builds the small tensor file that the round-trip, truncation and corruption tests share. */
static void make_tensor_file(void **buf, size_t *len) {
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    float a[3 * 5];
    for (int i = 0; i < 15; i++) a[i] = (float)i - 7.0f;
    uint16_t h[7];
    for (int i = 0; i < 7; i++) h[i] = sd_fp32_to_fp16((float)i * 0.5f);
    uint8_t q[2 * 3 * 18]; /* Q4_0: 64 columns = 2 blocks of 18 bytes, 3 rows */
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 7);
    float one = 42.0f;
    const char *toks[] = {"a", "b"};
    assert_int_equal(sd_gguf_set_str(w, "general.architecture", "llama"), SD_OK);
    assert_int_equal(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 2), SD_OK);
    assert_int_equal(sd_gguf_add_tensor(w, "a", SD_TYPE_F32, 2, (uint64_t[]){5, 3}, a, sizeof a), SD_OK);
    assert_int_equal(sd_gguf_add_tensor(w, "h", SD_TYPE_F16, 1, (uint64_t[]){7}, h, sizeof h), SD_OK);
    assert_int_equal(sd_gguf_add_tensor(w, "q", SD_TYPE_Q4_0, 2, (uint64_t[]){64, 3}, q, sizeof q), SD_OK);
    assert_int_equal(sd_gguf_add_tensor(w, "s", SD_TYPE_F32, 1, (uint64_t[]){1}, &one, 4), SD_OK);
    assert_int_equal(sd_gguf_write_mem(w, buf, len), SD_OK);
    sd_gguf_writer_free(w);
}

static void test_roundtrip_tensors(void **state) {
    (void)state;
    void *buf;
    size_t len;
    make_tensor_file(&buf, &len);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "mem", &g), SD_OK);
    assert_int_equal(sd_gguf_n_tensors(g), 4);
    assert_int_equal(sd_gguf_data_offset(g) % 32, 0);
    assert_int_equal(len % 32, 0); /* the last tensor is padded too */
    const char *names[] = {"a", "h", "q", "s"};
    const uint64_t sizes[] = {60, 14, 108, 4};
    for (int i = 0; i < 4; i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        assert_true(sd_str_eq(t->name, names[i]));
        assert_ptr_equal(sd_gguf_find_tensor(g, names[i]), t);
        assert_int_equal(t->nbytes, sizes[i]);
        assert_int_equal(t->offset % 32, 0);
        const uint8_t *p = t->data;
        assert_ptr_equal(p, (const uint8_t *)buf + sd_gguf_data_offset(g) + t->offset);
        assert_int_equal((size_t)(p - (const uint8_t *)buf) % 32, 0);
    }
    assert_null(sd_gguf_tensor_at(g, 4));
    assert_null(sd_gguf_find_tensor(g, "nope"));
    const sd_gguf_tensor *a = sd_gguf_find_tensor(g, "a");
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->ne[0], 5);
    assert_int_equal(a->ne[1], 3);
    assert_int_equal(a->ne[2], 1);
    assert_int_equal(a->ne[3], 1);
    assert_int_equal(a->type, SD_TYPE_F32);
    float a5;
    memcpy(&a5, (const uint8_t *)a->data + 5 * 4, 4);
    assert_true(a5 == -2.0f);
    const sd_gguf_tensor *h = sd_gguf_find_tensor(g, "h");
    uint16_t h3;
    memcpy(&h3, (const uint8_t *)h->data + 6, 2);
    assert_true(sd_fp16_to_fp32(h3) == 1.5f);
    const sd_gguf_tensor *q = sd_gguf_find_tensor(g, "q");
    assert_int_equal(q->type, SD_TYPE_Q4_0);
    assert_int_equal(((const uint8_t *)q->data)[107], (uint8_t)(107 * 7));
    sd_gguf_free(g);
    free(buf);
}

static void test_writer_errors_and_file(void **state) {
    (void)state;
    sd_gguf_writer *w = sd_gguf_writer_create();
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(sd_gguf_add_tensor(w, "x", SD_TYPE_F32, 1, (uint64_t[]){4}, x, sizeof x), SD_OK);
    assert_int_equal(sd_gguf_add_tensor(w, "x", SD_TYPE_F32, 1, (uint64_t[]){4}, x, sizeof x), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "duplicate tensor x"));
    assert_int_equal(sd_gguf_add_tensor(w, "y", SD_TYPE_F32, 1, (uint64_t[]){4}, x, 12), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "12 bytes given"));
    assert_int_equal(sd_gguf_add_tensor(w, "y", SD_TYPE_Q8_0, 1, (uint64_t[]){4}, x, 16), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "not a multiple of the q8_0 block size 32"));
    assert_int_equal(sd_gguf_add_tensor(w, "y", 4, 1, (uint64_t[]){4}, x, 16), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_add_tensor(w, "y", SD_TYPE_F32, 5, (uint64_t[]){4, 1, 1, 1, 1}, x, 16),
                     SD_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_set_str(w, "k", NULL), SD_ERR_INVALID_ARG);

    void *buf;
    size_t len;
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    const char *path = sdtest_tmp_path("writer.gguf");
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    size_t flen;
    void *fbuf = sdtest_read_file(path, &flen);
    assert_non_null(fbuf);
    assert_int_equal(flen, len);
    assert_memory_equal(fbuf, buf, len);
    free(fbuf);
    free(buf);
    assert_int_equal(sd_gguf_write_file(w, "/nonexistent-dir/x.gguf"), SD_ERR_IO);
    assert_non_null(strstr(sd_last_error(), "/nonexistent-dir/x.gguf"));

    /* A caller-chosen alignment is honoured by the writer and the parser. */
    assert_int_equal(sd_gguf_set_u32(w, "general.alignment", 64), SD_OK);
    assert_int_equal(sd_gguf_add_tensor(w, "z", SD_TYPE_F32, 1, (uint64_t[]){4}, x, sizeof x), SD_OK);
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "mem", &g), SD_OK);
    assert_int_equal(sd_gguf_alignment(g), 64);
    assert_int_equal(sd_gguf_find_tensor(g, "z")->offset, 64);
    assert_int_equal(sd_gguf_data_offset(g) % 64, 0);
    sd_gguf_free(g);
    free(buf);
    assert_int_equal(sd_gguf_set_u32(w, "general.alignment", 48), SD_OK);
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_ERR_INVALID_ARG);
    sd_gguf_writer_free(w);
    sd_gguf_writer_free(NULL);
    sd_gguf_free(NULL);
}

/* ------------------------------------------------------------------ hostile input */

static void test_empty_and_tiny(void **state) {
    (void)state;
    expect_fail("", 0, SD_ERR_FORMAT, "empty file");
    expect_fail("GG", 2, SD_ERR_FORMAT, "too short for the GGUF magic");
    expect_fail("GGUF", 4, SD_ERR_FORMAT, "truncated at byte 4");
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse("", 0, "x", NULL), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_parse(NULL, 10, "x", &g), SD_ERR_INVALID_ARG);
    assert_null(g);
}

/* Every prefix of a valid file fails cleanly until the last tensor's bytes are complete. */
static void test_truncated_everywhere(void **state) {
    (void)state;
    void *buf;
    size_t len;
    make_tensor_file(&buf, &len);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "x.gguf", &g), SD_OK);
    const sd_gguf_tensor *last = sd_gguf_tensor_at(g, sd_gguf_n_tensors(g) - 1);
    size_t needed = (size_t)(sd_gguf_data_offset(g) + last->offset + last->nbytes);
    sd_gguf_free(g);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        g = (sd_gguf *)&g;
        sd_status st = sd_gguf_parse(copy, cut, "x.gguf", &g);
        if (cut < needed) {
            if (st != SD_ERR_FORMAT) print_error("cut at %zu: status %d\n", cut, st);
            assert_int_equal(st, SD_ERR_FORMAT);
            assert_null(g);
            assert_non_null(strstr(sd_last_error(), "x.gguf: "));
        } else {
            assert_int_equal(st, SD_OK); /* only the trailing padding is missing */
            sd_gguf_free(g);
        }
        free(copy);
    }
    /* The message of a cut inside the tensor data names the tensor and the extent. */
    expect_fail(buf, needed - 1, SD_ERR_FORMAT, "tensor s: data [");
    free(buf);
}

/* Every single-byte corruption of a valid file parses or fails cleanly (ASan/UBSan watch). */
static void test_corrupted_everywhere(void **state) {
    (void)state;
    void *buf;
    size_t len;
    make_tensor_file(&buf, &len);
    uint8_t *copy = malloc(len);
    static const uint8_t vals[] = {0x00, 0x01, 0x05, 0x20, 0x7f, 0x80, 0xff};
    int failures = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t k = 0; k < sizeof vals; k++) {
            memcpy(copy, buf, len);
            copy[i] = vals[k];
            sd_gguf *g = NULL;
            sd_status st = sd_gguf_parse(copy, len, "x.gguf", &g);
            if (st == SD_OK) {
                for (int64_t t = 0; t < sd_gguf_n_tensors(g); t++) {
                    const sd_gguf_tensor *tt = sd_gguf_tensor_at(g, t);
                    assert_true((const uint8_t *)tt->data + tt->nbytes <= copy + len);
                }
                sd_gguf_free(g);
            } else {
                assert_null(g);
                assert_true(sd_last_error()[0] != 0);
                failures++;
            }
        }
    }
    assert_true(failures > 0);
    free(copy);
    free(buf);
}

static void test_bad_magic(void **state) {
    (void)state;
    bb b = {0};
    bb_u32(&b, 0x12345678u), bb_u32(&b, 3), bb_u64(&b, 0), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "bad magic 0x12345678 (not a GGUF file)");
}

static void test_bad_version(void **state) {
    (void)state;
    bb b = {0};
    bb_header(&b, 1, 0, 0);
    expect_fail_bb(&b, SD_ERR_UNSUPPORTED, "unsupported GGUF version 1 (need 2 or 3)");
    bb_header(&b, 4, 0, 0);
    expect_fail_bb(&b, SD_ERR_UNSUPPORTED, "unsupported GGUF version 4");
    bb_header(&b, 0x03000000u, 0, 0);
    expect_fail_bb(&b, SD_ERR_UNSUPPORTED, "big-endian");
}

static void test_absurd_counts(void **state) {
    (void)state;
    bb b = {0};
    bb_header(&b, 3, 0, 1ull << 40);
    expect_fail_bb(&b, SD_ERR_FORMAT, "kv_count 1099511627776 cannot fit");
    bb_header(&b, 3, UINT64_MAX, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor_count 18446744073709551615 cannot fit");
    /* Each count fits alone, not both together. */
    bb_header(&b, 3, 2, 2);
    for (int i = 0; i < 40; i++) bb_le(&b, 0, 1);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor_count 2 cannot fit");
}

static void test_string_lengths(void **state) {
    (void)state;
    bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1000), bb_put(&b, "abcdefgh", 8);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key of metadata entry #0: string length 1000 at byte 24 runs past the end");

    bb_header(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX - 3), bb_put(&b, "abcdefghijklmnop", 16);
    expect_fail_bb(&b, SD_ERR_FORMAT, "string length 18446744073709551612");

    /* In a value and in a string array element. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "k"), bb_u32(&b, SD_GGUF_STRING), bb_u64(&b, UINT64_MAX), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "value of key k: string length 18446744073709551615");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "toks"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_STRING), bb_u64(&b, 2);
    bb_str(&b, "ok"), bb_u64(&b, 9), bb_put(&b, "short", 5);
    expect_fail_bb(&b, SD_ERR_FORMAT, "value of key toks: string length 9");
}

static void test_array_lengths(void **state) {
    (void)state;
    bb b = {0};
    /* n * 4 wraps around: must not be taken as a small size. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "arr"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_UINT32), bb_u64(&b, (UINT64_MAX / 4) + 2);
    bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key arr: array of 4611686018427387905 uint32 elements runs past the end");
    /* A string array longer than the bytes could hold is rejected before allocating. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "toks"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_STRING), bb_u64(&b, 1ull << 60);
    bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "array of 1152921504606846976 string elements");
    /* Exactly one element short. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "f"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_FLOAT32), bb_u64(&b, 3);
    bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "array of 3 float32 elements");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "f"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, 13), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key f: unknown array element type 13");
}

/* Writes an array nested `depth` levels deep whose innermost level holds two uint16. */
static void bb_nested(bb *b, int depth) {
    if (depth == 1) {
        bb_u32(b, SD_GGUF_UINT16), bb_u64(b, 2), bb_le(b, 1, 2), bb_le(b, 2, 2);
        return;
    }
    bb_u32(b, SD_GGUF_ARRAY), bb_u64(b, 2);
    bb_nested(b, depth - 1);
    bb_nested(b, depth - 1);
}

static void test_nested_arrays(void **state) {
    (void)state;
    bb b = {0};
    /* [[1, 2], [1, 2]] then [["x"]]: legal, skipped over, the next key still parses. */
    bb_header(&b, 3, 0, 3);
    bb_str(&b, "nest"), bb_u32(&b, SD_GGUF_ARRAY), bb_nested(&b, 2);
    bb_str(&b, "nests"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_ARRAY), bb_u64(&b, 1);
    bb_u32(&b, SD_GGUF_STRING), bb_u64(&b, 1), bb_str(&b, "x");
    bb_kv_u32(&b, "after", 9);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(b.p, b.n, "x.gguf", &g), SD_OK);
    const sd_gguf_kv *kv = sd_gguf_find_kv(g, "nest");
    assert_int_equal(kv->type, SD_GGUF_ARRAY);
    assert_int_equal(kv->arr_type, SD_GGUF_ARRAY);
    assert_int_equal(kv->arr_n, 2);
    assert_null(kv->arr_strs);
    uint32_t u;
    assert_int_equal(sd_gguf_get_u32(g, "after", &u), SD_OK);
    assert_int_equal(u, 9);
    sd_gguf_free(g);
    free(b.p);
    b = (bb){0};

    bb_header(&b, 3, 0, 1);
    bb_str(&b, "deep"), bb_u32(&b, SD_GGUF_ARRAY), bb_nested(&b, 8);
    assert_int_equal(sd_gguf_parse(b.p, b.n, "x.gguf", &g), SD_OK);
    sd_gguf_free(g);
    free(b.p);
    b = (bb){0};
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "deep"), bb_u32(&b, SD_GGUF_ARRAY), bb_nested(&b, 9);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key deep: arrays nested deeper than 8 levels");

    /* An inner length that overflows, and an inner bool that is not 0/1. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "in"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_ARRAY), bb_u64(&b, 1);
    bb_u32(&b, SD_GGUF_UINT64), bb_u64(&b, UINT64_MAX / 8 + 1), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key in: array of 2305843009213693952 uint64 elements");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "in"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_ARRAY), bb_u64(&b, 1);
    bb_u32(&b, SD_GGUF_BOOL), bb_u64(&b, 2), bb_le(&b, 1, 1), bb_le(&b, 2, 1);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key in: bool value 2");
    /* Outer count that cannot hold that many inner headers. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "in"), bb_u32(&b, SD_GGUF_ARRAY), bb_u32(&b, SD_GGUF_ARRAY), bb_u64(&b, 3);
    bb_u32(&b, SD_GGUF_UINT8), bb_u64(&b, 0), bb_u32(&b, SD_GGUF_UINT8), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "array of 3 array elements");
}

static void test_unknown_value_type(void **state) {
    (void)state;
    bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "weird"), bb_u32(&b, 13), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key weird: unknown value type 13");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "weird"), bb_u32(&b, 0xffffffffu), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "unknown value type 4294967295");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "flag"), bb_u32(&b, SD_GGUF_BOOL), bb_le(&b, 2, 1), bb_u64(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "key flag: bool value 2 is neither 0 nor 1");
}

static void test_unknown_tensor_type(void **state) {
    (void)state;
    bb b = {0};
    uint64_t ne[1] = {8};
    bb_one_tensor(&b, 200, 1, ne, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: unknown ggml type 200");
    /* Inside ggml's range (iq4_nl = 20): well-formed but not ours. */
    bb_one_tensor(&b, 20, 1, ne, 0);
    expect_fail_bb(&b, SD_ERR_UNSUPPORTED, "tensor t: unknown ggml type 20");
    /* Known but unsupported by the kernels: the parser accepts it. */
    uint64_t ne32[1] = {32};
    bb_one_tensor(&b, SD_TYPE_Q8_0, 1, ne32, 0);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(b.p, b.n, "x.gguf", &g), SD_OK);
    assert_int_equal(sd_gguf_tensor_at(g, 0)->nbytes, 34);
    sd_gguf_free(g);
    free(b.p);
    b = (bb){0};
    bb_one_tensor(&b, SD_TYPE_Q8_0, 1, ne, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: ne[0] = 8 is not a multiple of the q8_0 block size 32");
}

static void test_tensor_dims(void **state) {
    (void)state;
    bb b = {0};
    uint64_t ne5[5] = {1, 1, 1, 1, 8};
    bb_one_tensor(&b, SD_TYPE_F32, 5, ne5, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: n_dims 5 > 4");
    uint64_t big[3] = {1ull << 32, 1ull << 32, 1ull << 32};
    bb_one_tensor(&b, SD_TYPE_F32, 3, big, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: shape overflows at ne[1] = 4294967296");
    uint64_t neg[1] = {UINT64_MAX};
    bb_one_tensor(&b, SD_TYPE_F32, 1, neg, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "shape overflows at ne[0]");
    /* Elements fit in int64 but the bytes do not. */
    uint64_t bytes[2] = {1ull << 30, 1ull << 31};
    bb_one_tensor(&b, SD_TYPE_F32, 2, bytes, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: data [96, 9223372036854775904) outside file");
    uint64_t huge[1] = {(1ull << 62)};
    bb_one_tensor(&b, SD_TYPE_F32, 1, huge, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: byte size overflows");
}

static void test_tensor_outside_file(void **state) {
    (void)state;
    bb b = {0};
    uint64_t ne[1] = {8};
    bb_one_tensor(&b, SD_TYPE_F32, 1, ne, 0);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(b.p, b.n, "x.gguf", &g), SD_OK);
    sd_gguf_free(g);
    free(b.p);
    b = (bb){0};
    bb_one_tensor(&b, SD_TYPE_F32, 1, ne, 64);
    expect_fail_bb(&b, SD_ERR_FORMAT, "x.gguf: tensor t: data [128, 160) outside file of 128 bytes");
    bb_one_tensor(&b, SD_TYPE_F32, 1, ne, UINT64_MAX - 31);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: data at offset 18446744073709551584 + 32 bytes overflows");
    uint64_t ne17[1] = {17};
    bb_one_tensor(&b, SD_TYPE_F32, 1, ne17, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "data [64, 132) outside file of 128 bytes");
}

static void test_misaligned_offset(void **state) {
    (void)state;
    bb b = {0};
    uint64_t ne[1] = {4};
    bb_one_tensor(&b, SD_TYPE_F32, 1, ne, 4);
    expect_fail_bb(&b, SD_ERR_FORMAT, "tensor t: offset 4 is not a multiple of the alignment 32");
}

static void bb_aligned_file(bb *b, uint32_t align) {
    bb_header(b, 3, 1, 1);
    bb_kv_u32(b, "general.alignment", align);
    bb_tinfo(b, "t", 1, (uint64_t[]){4}, SD_TYPE_F32, 0);
    bb_pad(b, 32);
    static const uint8_t z[16];
    bb_put(b, z, sizeof z);
}

static void test_bad_alignment(void **state) {
    (void)state;
    bb b = {0};
    bb_aligned_file(&b, 0);
    expect_fail_bb(&b, SD_ERR_FORMAT, "general.alignment 0 is not a nonzero power of two");
    bb_aligned_file(&b, 3);
    expect_fail_bb(&b, SD_ERR_FORMAT, "general.alignment 3 is not a nonzero power of two");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.alignment"), bb_u32(&b, SD_GGUF_STRING), bb_str(&b, "32");
    expect_fail_bb(&b, SD_ERR_FORMAT, "general.alignment has type string, expected uint32");
    bb_aligned_file(&b, 8);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(b.p, b.n, "x.gguf", &g), SD_OK);
    assert_int_equal(sd_gguf_alignment(g), 8);
    assert_int_equal(sd_gguf_data_offset(g) % 8, 0);
    sd_gguf_free(g);
    free(b.p);
}

static void test_duplicates(void **state) {
    (void)state;
    bb b = {0};
    bb_header(&b, 3, 0, 3);
    bb_kv_u32(&b, "a", 1);
    bb_kv_u32(&b, "b", 2);
    bb_kv_u32(&b, "a", 3);
    expect_fail_bb(&b, SD_ERR_FORMAT, "x.gguf: duplicate key a (metadata entries #0 and #2)");
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "w", 1, (uint64_t[]){4}, SD_TYPE_F32, 0);
    bb_tinfo(&b, "w", 1, (uint64_t[]){4}, SD_TYPE_F32, 32);
    bb_pad(&b, 32);
    static const uint8_t z[64];
    bb_put(&b, z, sizeof z);
    expect_fail_bb(&b, SD_ERR_FORMAT, "x.gguf: duplicate tensor w (tensors #0 and #1)");
}

/* ------------------------------------------------------------------ real files */

static void test_real_stories260k(void **state) {
    (void)state;
    char *path = sdtest_shared_or_skip("models/stories260K/stories260K.gguf");
    size_t len;
    void *buf = sdtest_read_file(path, &len);
    assert_non_null(buf);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, path, &g), SD_OK);
    assert_int_equal(sd_gguf_n_tensors(g), 48);
    sd_str arch;
    assert_int_equal(sd_gguf_get_str(g, "general.architecture", &arch), SD_OK);
    assert_true(sd_str_eq(arch, "llama"));
    uint32_t ctx;
    assert_int_equal(sd_gguf_get_u32(g, "llama.context_length", &ctx), SD_OK);
    assert_int_equal(ctx, 128);
    const sd_gguf_tensor *emb = sd_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->type, SD_TYPE_F32);
    assert_int_equal(emb->ne[0], 64);
    assert_int_equal(emb->ne[1], 512);
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        assert_int_equal(t->type, SD_TYPE_F32);
        assert_true((const uint8_t *)t->data + t->nbytes <= (const uint8_t *)buf + len);
    }
    sd_gguf_free(g);
    free(buf);
    free(path);
}

static void test_real_vocab_spm(void **state) {
    (void)state;
    char *path = sdtest_shared_or_skip("vocab-tests/ggml-vocab-llama-spm.gguf");
    size_t len;
    void *buf = sdtest_read_file(path, &len);
    assert_non_null(buf);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, path, &g), SD_OK);
    assert_int_equal(sd_gguf_n_tensors(g), 0);
    const sd_gguf_kv *toks, *scores;
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.tokens", SD_GGUF_STRING, &toks), SD_OK);
    assert_int_equal(toks->arr_n, 32000);
    assert_true(sd_str_eq(toks->arr_strs[1], "<s>"));
    assert_true(sd_str_eq(toks->arr_strs[3], "<0x00>"));
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.scores", SD_GGUF_FLOAT32, &scores), SD_OK);
    assert_int_equal(scores->arr_n, 32000);
    sd_gguf_free(g);
    free(buf);
    free(path);
}

/* The other shipped GGUF files (quantised and F16 conversions, the draft, other vocabularies)
 * all parse, and every tensor extent lies inside the file. */
static void test_real_others(void **state) {
    (void)state;
    static const char *const rels[] = {
        "models/stories260K/llama.cpp-quantized/stories260K-F16.gguf",
        "models/stories260K/llama.cpp-quantized/stories260K-Q4_0-mix.gguf",
        "models/stories260K/llama.cpp-quantized/stories260K-Q8_0-mix.gguf",
        "models/stories-draft/stories-draft.gguf",
        "vocab-tests/ggml-vocab-gpt-2.gguf",
        "vocab-tests/ggml-vocab-deepseek-coder.gguf",
    };
    int found = 0;
    for (size_t i = 0; i < sizeof rels / sizeof rels[0]; i++) {
        const char *p = sdtest_shared(rels[i]);
        if (!p) continue;
        char *path = strdup(p);
        size_t len;
        void *buf = sdtest_read_file(path, &len);
        assert_non_null(buf);
        sd_gguf *g;
        sd_status st = sd_gguf_parse(buf, len, path, &g);
        if (st) print_error("%s\n", sd_last_error());
        assert_int_equal(st, SD_OK);
        for (int64_t t = 0; t < sd_gguf_n_tensors(g); t++) {
            const sd_gguf_tensor *tt = sd_gguf_tensor_at(g, t);
            assert_non_null(sd_type_info(tt->type));
            assert_true((const uint8_t *)tt->data + tt->nbytes <= (const uint8_t *)buf + len);
        }
        sd_gguf_free(g);
        free(buf);
        free(path);
        found++;
    }
    if (!found) sdtest_missing_shared("GGUF files (models/stories260K/llama.cpp-quantized, vocab-tests)");
}

/* ------------------------------------------------------------------ types and fp16 */

static void test_type_traits(void **state) {
    (void)state;
    assert_int_equal(sd_type_info(SD_TYPE_F32)->type_size, 4);
    assert_true(sd_type_info(SD_TYPE_F32)->supported);
    assert_true(sd_type_info(SD_TYPE_F16)->supported);
    assert_true(sd_type_info(SD_TYPE_Q4_0)->supported);
    assert_false(sd_type_info(SD_TYPE_Q2_K)->supported); /* a known type without kernels */
    assert_int_equal(sd_type_info(SD_TYPE_Q6_K)->type_size, 210);
    assert_int_equal(sd_type_info(SD_TYPE_BF16)->block_size, 1);
    assert_null(sd_type_info(4));
    assert_null(sd_type_info(SD_TYPE_COUNT));
    assert_null(sd_type_info(UINT32_MAX));
    assert_int_equal(sd_type_row_bytes(SD_TYPE_F16, 7), 14);
    assert_int_equal(sd_type_row_bytes(SD_TYPE_Q4_K, 512), 288);
    assert_int_equal(sd_type_row_bytes(SD_TYPE_Q8_0, 33), 0);
    assert_int_equal(sd_type_row_bytes(SD_TYPE_F32, -4), 0);
    assert_int_equal(sd_type_row_bytes(99, 4), 0);
}

static void test_fp16(void **state) {
    (void)state;
    assert_int_equal(sd_fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(sd_fp32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(sd_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(sd_fp32_to_fp16(65520.0f), 0x7c00);  /* ties to even: rounds up to inf */
    assert_int_equal(sd_fp32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(sd_fp32_to_fp16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    assert_int_equal(sd_fp32_to_fp16(2.9802322e-8f), 0x0000); /* half of it: tie to even 0 */
    assert_int_equal(sd_fp32_to_fp16(1.0f + 1.0f / 2048.0f), 0x3c00); /* tie: stays even */
    assert_int_equal(sd_fp32_to_fp16(1.0f + 3.0f / 2048.0f), 0x3c02); /* tie: rounds to even */
    assert_int_equal(sd_fp32_to_fp16(INFINITY), 0x7c00);
    assert_true((sd_fp32_to_fp16(NAN) & 0x7fff) > 0x7c00);
    /* Every finite half survives a round trip through float. */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u) continue;
        assert_int_equal(sd_fp32_to_fp16(sd_fp16_to_fp32((uint16_t)h)), h);
    }
    assert_true(sd_fp16_to_fp32(0x0001) == 5.9604645e-8f);
    assert_true(isnan(sd_fp16_to_fp32(0x7e00)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_scalars),
        cmocka_unit_test(test_parse_all_scalar_types),
        cmocka_unit_test(test_roundtrip_arrays),
        cmocka_unit_test(test_roundtrip_tensors),
        cmocka_unit_test(test_writer_errors_and_file),
        cmocka_unit_test(test_empty_and_tiny),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corrupted_everywhere),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_absurd_counts),
        cmocka_unit_test(test_string_lengths),
        cmocka_unit_test(test_array_lengths),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_unknown_value_type),
        cmocka_unit_test(test_unknown_tensor_type),
        cmocka_unit_test(test_tensor_dims),
        cmocka_unit_test(test_tensor_outside_file),
        cmocka_unit_test(test_misaligned_offset),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_real_stories260k),
        cmocka_unit_test(test_real_vocab_spm),
        cmocka_unit_test(test_real_others),
        cmocka_unit_test(test_type_traits),
        cmocka_unit_test(test_fp16),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
