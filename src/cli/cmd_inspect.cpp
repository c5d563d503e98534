// mxserve inspect: what a checkpoint holds and how the model maps it.
#include <cstdio>

#include "cli/commands.h"
#include "models/model.h"

namespace mx::cli {

Command add_inspect(CLI::App& app) {
  auto* s = app.add_subcommand("inspect", "Show architecture, parameter count and tensor mapping");
  auto model = std::make_shared<std::string>();
  s->add_option("--model", *model, "Model directory, .gguf file or llama2.c .bin")->required();
  return {s, [model] {
            auto m = load_model(*model);
            const ModelConfig& c = m->config();
            std::printf("architecture: %s\n", c.architecture.c_str());
            std::printf("parameters: %lld\n", (long long)m->parameter_count());
            std::printf("layers: %d  hidden: %d  intermediate: %d  heads: %d  kv_heads: %d  "
                        "head_dim: %d  vocab: %d  context: %d\n",
                        c.num_hidden_layers, c.hidden_size, c.intermediate_size,
                        c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size,
                        c.max_position_embeddings);
            std::printf("rope: theta %g, scaling %s; tied embeddings: %s; qk_norm: %s; "
                        "attention bias: %s\n",
                        c.rope_theta, c.rope_scaling.type.c_str(), c.tie_word_embeddings ? "yes" : "no",
                        c.qk_norm ? "yes" : "no", c.attention_bias ? "yes" : "no");
            if (c.moe.n_routed_experts > 0) {
              const MoeConfig& e = c.moe;
              std::printf("moe: %d routed experts (top %d, %s router, groups %d/%d, norm_topk_prob %s, "
                          "scaling %g), %d shared, expert intermediate %d\n",
                          e.n_routed_experts, e.num_experts_per_tok, e.sigmoid_router ? "sigmoid" : "softmax",
                          e.topk_group, e.n_group, e.norm_topk_prob ? "yes" : "no",
                          e.routed_scaling_factor, e.n_shared_experts, e.moe_intermediate_size);
            }
            if (c.mla)
              std::printf("mla: q_lora_rank %d, kv_lora_rank %d, qk_nope %d, qk_rope %d, v %d\n",
                          c.mla_cfg.q_lora_rank, c.mla_cfg.kv_lora_rank, c.mla_cfg.qk_nope_head_dim,
                          c.mla_cfg.qk_rope_head_dim, c.mla_cfg.v_head_dim);
            std::printf("mtp layers: %d\n", m->num_mtp_layers());
            std::printf("weights: %.1f MiB; read per decoded token: %.1f MiB\n", m->weight_bytes() / 1048576.0,
                        m->bytes_per_token() / 1048576.0);
            std::printf("tensors (checkpoint name -> parameter, dtype, shape):\n");
            for (const auto& b : m->weight_map())
              std::printf("  %s -> %s  %s %s\n", b.checkpoint_name.c_str(), b.param.c_str(),
                          dtype_name(b.dtype), b.shape.c_str());
            return 0;
          }};
}

}  // namespace mx::cli
