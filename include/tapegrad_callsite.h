/* tapegrad call sites: every public function that returns a new tensor is
 * wrapped in a macro of its own name that first records the caller's
 * __FILE__:__LINE__ (tg_set_callsite), then passes the result through
 * tg_check_result, which turns an anomaly found inside the call (anomaly
 * mode) into NULL and an error naming that line. A macro does not expand
 * inside its own expansion, so each one calls the real function; taking a
 * function's address (no parentheses) is untouched.
 *
 * Included by <tapegrad.h>. Define TG_NO_CALLSITES to do without (the
 * library itself is built that way, so nested calls keep the user's line).
 * Generated from the headers' declarations; keep it in step with them. */
#ifndef TAPEGRAD_CALLSITE_H
#define TAPEGRAD_CALLSITE_H

#ifndef TG_NO_CALLSITES

#define TG_CALL_(fn, call)                                                     \
    (tg_set_callsite(__FILE__, __LINE__), tg_check_result((call), #fn))

#define tg_add(...)        TG_CALL_(tg_add, tg_add(__VA_ARGS__))
#define tg_add_scalar(...) TG_CALL_(tg_add_scalar, tg_add_scalar(__VA_ARGS__))
#define tg_arange(...)     TG_CALL_(tg_arange, tg_arange(__VA_ARGS__))
#define tg_attention(...)  TG_CALL_(tg_attention, tg_attention(__VA_ARGS__))
#define tg_attention_softmax(...)                                              \
    TG_CALL_(tg_attention_softmax, tg_attention_softmax(__VA_ARGS__))
#define tg_block_forward(...)                                                  \
    TG_CALL_(tg_block_forward, tg_block_forward(__VA_ARGS__))
#define tg_cat(...)        TG_CALL_(tg_cat, tg_cat(__VA_ARGS__))
#define tg_contiguous(...) TG_CALL_(tg_contiguous, tg_contiguous(__VA_ARGS__))
#define tg_cross_entropy(...)                                                  \
    TG_CALL_(tg_cross_entropy, tg_cross_entropy(__VA_ARGS__))
#define tg_detach(...) TG_CALL_(tg_detach, tg_detach(__VA_ARGS__))
#define tg_div(...)    TG_CALL_(tg_div, tg_div(__VA_ARGS__))
#define tg_embed_forward(...)                                                  \
    TG_CALL_(tg_embed_forward, tg_embed_forward(__VA_ARGS__))
#define tg_embed_positions(...)                                                \
    TG_CALL_(tg_embed_positions, tg_embed_positions(__VA_ARGS__))
#define tg_embedding(...) TG_CALL_(tg_embedding, tg_embedding(__VA_ARGS__))
#define tg_eq(...)        TG_CALL_(tg_eq, tg_eq(__VA_ARGS__))
#define tg_eq_scalar(...) TG_CALL_(tg_eq_scalar, tg_eq_scalar(__VA_ARGS__))
#define tg_exp(...)       TG_CALL_(tg_exp, tg_exp(__VA_ARGS__))
#define tg_expand(...)    TG_CALL_(tg_expand, tg_expand(__VA_ARGS__))
#define tg_from_data(...) TG_CALL_(tg_from_data, tg_from_data(__VA_ARGS__))
#define tg_full(...)      TG_CALL_(tg_full, tg_full(__VA_ARGS__))
#define tg_full_like(...) TG_CALL_(tg_full_like, tg_full_like(__VA_ARGS__))
#define tg_gather(...)    TG_CALL_(tg_gather, tg_gather(__VA_ARGS__))
#define tg_ge(...)        TG_CALL_(tg_ge, tg_ge(__VA_ARGS__))
#define tg_ge_scalar(...) TG_CALL_(tg_ge_scalar, tg_ge_scalar(__VA_ARGS__))
#define tg_gelu(...)      TG_CALL_(tg_gelu, tg_gelu(__VA_ARGS__))
#define tg_gpt_forward(...)                                                    \
    TG_CALL_(tg_gpt_forward, tg_gpt_forward(__VA_ARGS__))
#define tg_gpt_generate(...)                                                   \
    TG_CALL_(tg_gpt_generate, tg_gpt_generate(__VA_ARGS__))
#define tg_gpt_loss(...)  TG_CALL_(tg_gpt_loss, tg_gpt_loss(__VA_ARGS__))
#define tg_gt(...)        TG_CALL_(tg_gt, tg_gt(__VA_ARGS__))
#define tg_gt_scalar(...) TG_CALL_(tg_gt_scalar, tg_gt_scalar(__VA_ARGS__))
#define tg_head_forward(...)                                                   \
    TG_CALL_(tg_head_forward, tg_head_forward(__VA_ARGS__))
#define tg_layer_norm(...) TG_CALL_(tg_layer_norm, tg_layer_norm(__VA_ARGS__))
#define tg_layernorm_forward(...)                                              \
    TG_CALL_(tg_layernorm_forward, tg_layernorm_forward(__VA_ARGS__))
#define tg_le(...)        TG_CALL_(tg_le, tg_le(__VA_ARGS__))
#define tg_le_scalar(...) TG_CALL_(tg_le_scalar, tg_le_scalar(__VA_ARGS__))
#define tg_linear_forward(...)                                                 \
    TG_CALL_(tg_linear_forward, tg_linear_forward(__VA_ARGS__))
#define tg_load_npy(...) TG_CALL_(tg_load_npy, tg_load_npy(__VA_ARGS__))
#define tg_log(...)      TG_CALL_(tg_log, tg_log(__VA_ARGS__))
#define tg_log_softmax(...)                                                    \
    TG_CALL_(tg_log_softmax, tg_log_softmax(__VA_ARGS__))
#define tg_lt(...)        TG_CALL_(tg_lt, tg_lt(__VA_ARGS__))
#define tg_lt_scalar(...) TG_CALL_(tg_lt_scalar, tg_lt_scalar(__VA_ARGS__))
#define tg_masked_fill(...)                                                    \
    TG_CALL_(tg_masked_fill, tg_masked_fill(__VA_ARGS__))
#define tg_matmul(...)   TG_CALL_(tg_matmul, tg_matmul(__VA_ARGS__))
#define tg_max(...)      TG_CALL_(tg_max, tg_max(__VA_ARGS__))
#define tg_mean(...)     TG_CALL_(tg_mean, tg_mean(__VA_ARGS__))
#define tg_mean_all(...) TG_CALL_(tg_mean_all, tg_mean_all(__VA_ARGS__))
#define tg_mha_forward(...)                                                    \
    TG_CALL_(tg_mha_forward, tg_mha_forward(__VA_ARGS__))
#define tg_mlp_forward(...)                                                    \
    TG_CALL_(tg_mlp_forward, tg_mlp_forward(__VA_ARGS__))
#define tg_mse_loss(...)  TG_CALL_(tg_mse_loss, tg_mse_loss(__VA_ARGS__))
#define tg_mul(...)       TG_CALL_(tg_mul, tg_mul(__VA_ARGS__))
#define tg_narrow(...)    TG_CALL_(tg_narrow, tg_narrow(__VA_ARGS__))
#define tg_ne(...)        TG_CALL_(tg_ne, tg_ne(__VA_ARGS__))
#define tg_ne_scalar(...) TG_CALL_(tg_ne_scalar, tg_ne_scalar(__VA_ARGS__))
#define tg_neg(...)       TG_CALL_(tg_neg, tg_neg(__VA_ARGS__))
#define tg_ones(...)      TG_CALL_(tg_ones, tg_ones(__VA_ARGS__))
#define tg_ones_like(...) TG_CALL_(tg_ones_like, tg_ones_like(__VA_ARGS__))
#define tg_pcg64_randn(...)                                                    \
    TG_CALL_(tg_pcg64_randn, tg_pcg64_randn(__VA_ARGS__))
#define tg_pow_scalar(...) TG_CALL_(tg_pow_scalar, tg_pow_scalar(__VA_ARGS__))
#define tg_rand(...)       TG_CALL_(tg_rand, tg_rand(__VA_ARGS__))
#define tg_randn(...)      TG_CALL_(tg_randn, tg_randn(__VA_ARGS__))
#define tg_relu(...)       TG_CALL_(tg_relu, tg_relu(__VA_ARGS__))
#define tg_reshape(...)    TG_CALL_(tg_reshape, tg_reshape(__VA_ARGS__))
#define tg_scalar(...)     TG_CALL_(tg_scalar, tg_scalar(__VA_ARGS__))
#define tg_scale(...)      TG_CALL_(tg_scale, tg_scale(__VA_ARGS__))
#define tg_select(...)     TG_CALL_(tg_select, tg_select(__VA_ARGS__))
#define tg_slice(...)      TG_CALL_(tg_slice, tg_slice(__VA_ARGS__))
#define tg_softmax(...)    TG_CALL_(tg_softmax, tg_softmax(__VA_ARGS__))
#define tg_sqrt(...)       TG_CALL_(tg_sqrt, tg_sqrt(__VA_ARGS__))
#define tg_squeeze(...)    TG_CALL_(tg_squeeze, tg_squeeze(__VA_ARGS__))
#define tg_sub(...)        TG_CALL_(tg_sub, tg_sub(__VA_ARGS__))
#define tg_sum(...)        TG_CALL_(tg_sum, tg_sum(__VA_ARGS__))
#define tg_sum_all(...)    TG_CALL_(tg_sum_all, tg_sum_all(__VA_ARGS__))
#define tg_to(...)         TG_CALL_(tg_to, tg_to(__VA_ARGS__))
#define tg_transpose(...)  TG_CALL_(tg_transpose, tg_transpose(__VA_ARGS__))
#define tg_tril(...)       TG_CALL_(tg_tril, tg_tril(__VA_ARGS__))
#define tg_triu(...)       TG_CALL_(tg_triu, tg_triu(__VA_ARGS__))
#define tg_unsqueeze(...)  TG_CALL_(tg_unsqueeze, tg_unsqueeze(__VA_ARGS__))
#define tg_where(...)      TG_CALL_(tg_where, tg_where(__VA_ARGS__))
#define tg_zeros(...)      TG_CALL_(tg_zeros, tg_zeros(__VA_ARGS__))
#define tg_zeros_like(...) TG_CALL_(tg_zeros_like, tg_zeros_like(__VA_ARGS__))

#endif /* TG_NO_CALLSITES */

#endif /* TAPEGRAD_CALLSITE_H */
