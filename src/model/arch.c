/* The architecture table (see arch.h): weight names and shapes, and what each family requires. */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

const sd_weight_info sd_weight_table[SD_W_COUNT] = {
    [SD_W_TOKEN_EMBD] = {"token_embd.weight", "model.embed_tokens.weight", SD_D_VOCAB, SD_D_EMBD, "token embeddings"},
    [SD_W_ROPE_FREQS] = {"rope_freqs.weight", NULL, SD_D_NONE, SD_D_ROPE_PAIRS, "RoPE frequency factors"},
    [SD_W_OUTPUT_NORM] = {"output_norm.weight", "model.norm.weight", SD_D_NONE, SD_D_EMBD, "output norm"},
    [SD_W_OUTPUT] = {"output.weight", "lm_head.weight", SD_D_VOCAB, SD_D_EMBD, "classifier"},
    [SD_W_ATTN_NORM] = {"blk.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight", SD_D_NONE, SD_D_EMBD,
                        "attention norm"},
    [SD_W_ATTN_Q] = {"blk.%d.attn_q.weight", "model.layers.%d.self_attn.q_proj.weight", SD_D_Q, SD_D_EMBD, "query"},
    [SD_W_ATTN_Q_B] = {"blk.%d.attn_q.bias", "model.layers.%d.self_attn.q_proj.bias", SD_D_NONE, SD_D_Q, "query bias"},
    [SD_W_ATTN_K] = {"blk.%d.attn_k.weight", "model.layers.%d.self_attn.k_proj.weight", SD_D_KV, SD_D_EMBD, "key"},
    [SD_W_ATTN_K_B] = {"blk.%d.attn_k.bias", "model.layers.%d.self_attn.k_proj.bias", SD_D_NONE, SD_D_KV, "key bias"},
    [SD_W_ATTN_V] = {"blk.%d.attn_v.weight", "model.layers.%d.self_attn.v_proj.weight", SD_D_KV, SD_D_EMBD, "value"},
    [SD_W_ATTN_V_B] = {"blk.%d.attn_v.bias", "model.layers.%d.self_attn.v_proj.bias", SD_D_NONE, SD_D_KV, "value bias"},
    [SD_W_ATTN_Q_NORM] = {"blk.%d.attn_q_norm.weight", "model.layers.%d.self_attn.q_norm.weight", SD_D_NONE, SD_D_HEAD,
                          "query norm"},
    [SD_W_ATTN_K_NORM] = {"blk.%d.attn_k_norm.weight", "model.layers.%d.self_attn.k_norm.weight", SD_D_NONE, SD_D_HEAD,
                          "key norm"},
    [SD_W_ATTN_OUT] = {"blk.%d.attn_output.weight", "model.layers.%d.self_attn.o_proj.weight", SD_D_EMBD, SD_D_Q,
                       "attention output"},
    [SD_W_FFN_NORM] = {"blk.%d.ffn_norm.weight", "model.layers.%d.post_attention_layernorm.weight", SD_D_NONE,
                       SD_D_EMBD, "feed-forward norm"},
    [SD_W_FFN_GATE] = {"blk.%d.ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight", SD_D_FF, SD_D_EMBD,
                       "feed-forward gate"},
    [SD_W_FFN_UP] = {"blk.%d.ffn_up.weight", "model.layers.%d.mlp.up_proj.weight", SD_D_FF, SD_D_EMBD, "feed-forward up"},
    [SD_W_FFN_DOWN] = {"blk.%d.ffn_down.weight", "model.layers.%d.mlp.down_proj.weight", SD_D_EMBD, SD_D_FF,
                       "feed-forward down"},
};

/* Weights every family shares: the Llama block. */
#define SD_LLAMA_BLOCK                                                                                        \
    [SD_W_TOKEN_EMBD] = SD_NEED_YES, [SD_W_OUTPUT_NORM] = SD_NEED_YES, [SD_W_OUTPUT] = SD_NEED_OPT,          \
    [SD_W_ATTN_NORM] = SD_NEED_YES, [SD_W_ATTN_Q] = SD_NEED_YES, [SD_W_ATTN_K] = SD_NEED_YES,                \
    [SD_W_ATTN_V] = SD_NEED_YES, [SD_W_ATTN_OUT] = SD_NEED_YES, [SD_W_FFN_NORM] = SD_NEED_YES,              \
    [SD_W_FFN_GATE] = SD_NEED_YES, [SD_W_FFN_UP] = SD_NEED_YES, [SD_W_FFN_DOWN] = SD_NEED_YES

static const sd_arch k_archs[] = {
    /* llama.cpp's converter permutes Llama's q/k rows into interleaved pairs; Llama 3.1/3.2 carry
     * RoPE frequency factors; Llama may carry q/k/v biases (attention_bias checkpoints). */
    {"llama",
     {"LlamaForCausalLM", "MistralForCausalLM", NULL},
     {SD_LLAMA_BLOCK, [SD_W_ROPE_FREQS] = SD_NEED_OPT, [SD_W_ATTN_Q_B] = SD_NEED_OPT, [SD_W_ATTN_K_B] = SD_NEED_OPT,
      [SD_W_ATTN_V_B] = SD_NEED_OPT},
     SD_ROPE_INTERLEAVED,
     2048},
    {"qwen2",
     {"Qwen2ForCausalLM", NULL, NULL},
     {SD_LLAMA_BLOCK, [SD_W_ATTN_Q_B] = SD_NEED_YES, [SD_W_ATTN_K_B] = SD_NEED_YES, [SD_W_ATTN_V_B] = SD_NEED_YES},
     SD_ROPE_HALF,
     32768},
    {"qwen3",
     {"Qwen3ForCausalLM", NULL, NULL},
     {SD_LLAMA_BLOCK, [SD_W_ATTN_Q_NORM] = SD_NEED_YES, [SD_W_ATTN_K_NORM] = SD_NEED_YES},
     SD_ROPE_HALF,
     40960},
};
#define N_ARCHS (sizeof k_archs / sizeof k_archs[0])

const sd_arch *sd_arch_by_name(const char *name, size_t len) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strlen(k_archs[i].name) == len && memcmp(k_archs[i].name, name, len) == 0) return &k_archs[i];
    return NULL;
}

const sd_arch *sd_arch_by_hf(const char *hf_name) {
    for (size_t i = 0; i < N_ARCHS; i++)
        for (int j = 0; j < 3 && k_archs[i].hf_names[j]; j++)
            if (strcmp(k_archs[i].hf_names[j], hf_name) == 0) return &k_archs[i];
    return NULL;
}

const sd_arch *sd_arch_llama(void) { return &k_archs[0]; }

const char *sd_arch_list(void) { return "llama, qwen2, qwen3"; }
const char *sd_arch_hf_list(void) {
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
}

int64_t sd_dim_value(const sd_hparams *hp, sd_dim d) {
    switch (d) {
    case SD_D_EMBD: return hp->dim;
    case SD_D_Q: return (int64_t)hp->n_heads * hp->head_dim;
    case SD_D_KV: return (int64_t)hp->n_kv_heads * hp->head_dim;
    case SD_D_FF: return hp->hidden_dim;
    case SD_D_VOCAB: return hp->vocab_size;
    case SD_D_HEAD: return hp->head_dim;
    case SD_D_ROPE_PAIRS: return hp->rope_dim / 2;
    case SD_D_NONE: return 1;
    }
    return 0;
}

int sd_weight_name(sd_weight w, int layer, int hf, char *buf, size_t cap) {
    const char *fmt = hf ? sd_weight_table[w].hf : sd_weight_table[w].gguf;
    if (!fmt) return -1;
    int n = sd_weight_is_layer(w) ? snprintf(buf, cap, fmt, layer) : snprintf(buf, cap, "%s", fmt);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

const sd_arch_refused_key sd_arch_refused_keys[] = {
    {"rope.scaling.attn_factor", "RoPE attention factor", SD_NEUTRAL_ONE},
    {"expert_count", "mixture of experts", SD_NEUTRAL_ZERO},
    {"attention.clamp_kqv", "clamped q/k/v", SD_NEUTRAL_ZERO},
    {"logit_scale", "scaled logits", SD_NEUTRAL_ONE},
    {"attention.layer_norm_epsilon", "LayerNorm (not RMSNorm)", SD_NEUTRAL_NEVER},
    {NULL, NULL, SD_NEUTRAL_NEVER},
};
