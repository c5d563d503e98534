// Dense decoder-only transformers of the Llama family: LlamaForCausalLM,
// Qwen2ForCausalLM (q/k/v bias) and Qwen3ForCausalLM (per-head q/k RMSNorm).
// Tensor names follow HF transformers' modeling_llama.py / modeling_qwen2.py /
// modeling_qwen3.py (docs/architectures.md 4):
//   model.embed_tokens.weight                      [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight        [hidden]
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ .bias on q/k/v for Qwen2)
//   model.layers.{i}.self_attn.{q,k}_norm.weight   [head_dim]  (Qwen3)
//   model.layers.{i}.post_attention_layernorm.weight
//   model.layers.{i}.mlp.{gate,up,down}_proj.weight
//   model.norm.weight, lm_head.weight (absent when tie_word_embeddings)
#include "models/decoder.h"
#include "models/families.h"

namespace mx {

// The embedding, final norm and LM head every family has.
void bind_embed_and_head(WeightBinder& wb, const ModelConfig& c, DecoderModel& m) {
  m.embed = wb.need("model.embed_tokens.weight", "embed", {c.vocab_size, c.hidden_size}, MX_FLOAT_WEIGHTS);
  m.final_norm = bind_norm(wb, "model.norm.weight", c.hidden_size);
  if (c.tie_word_embeddings) {
    m.lm_head = m.embed;
    // Some exports store a copy of the tied matrix; it must then have the right shape.
    wb.optional("lm_head.weight", "lm_head (tied copy, unused)", {c.vocab_size, c.hidden_size},
                MX_FLOAT_WEIGHTS);
  } else {
    m.lm_head = wb.linear("lm_head", "lm_head", c.vocab_size, c.hidden_size);
  }
}

std::unique_ptr<Model> build_llama(const ModelConfig& c, Store store, const LoadOptions& opts) {
  return build_decoder(c, std::move(store), opts);  // GQA + dense SwiGLU in every layer
}

}  // namespace mx
