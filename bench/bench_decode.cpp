// Decode and prefill throughput of a dense model of realistic shape.
// Default: a synthetic Qwen2.5-0.5B-shaped Qwen3-family model in bf16 (written
// by make-test-model into build/models/ on first use), 2 threads.
//   build/bench_decode [MODEL_DIR] [--prompt N] [--tokens N] [--verify-costs]
// --verify-costs also times one forward of T = 1..8 tokens after the prompt:
// what a speculative verification of T - 1 drafts costs against a plain decode
// step (the ceiling of any speedup from drafting). Prints figures; decides nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/generate.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/matmul.h"
#include "models/model.h"
#include "devtools/synthetic.h"

using namespace mx;

int main(int argc, char** argv) {
  std::string dir = "build/models/qwen3-medium-bf16";
  int prompt_len = 128, tokens = 64;
  bool verify_costs = false;
  std::string kv_dtype = "auto";
  const char* usage =
      "usage: bench_decode [MODEL_DIR|FILE] [--prompt N] [--tokens N] [--kv-dtype auto|f32|bf16|fp8] "
      "[--verify-costs]\n";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--prompt") && i + 1 < argc) prompt_len = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--kv-dtype") && i + 1 < argc) kv_dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--verify-costs")) verify_costs = true;
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return std::printf("%s", usage), 0;
    else if (argv[i][0] == '-') return std::fprintf(stderr, "bench_decode: unknown option %s\n%s", argv[i], usage), 2;
    else dir = argv[i];
  }
  if (prompt_len < 1 || tokens < 2)
    return std::fprintf(stderr, "bench_decode: --prompt must be >= 1 and --tokens >= 2\n%s", usage), 2;
  try {
    // A file (.gguf, llama2.c .bin) is loaded as is; a directory without config.json gets the default model.
    if (!std::filesystem::is_regular_file(dir) && !std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
      std::fprintf(stderr, "writing synthetic model to %s ...\n", dir.c_str());
      SyntheticSpec s;
      s.arch = "qwen3";
      s.preset = "medium";
      write_synthetic_model(dir, s);
    }
    auto model = load_model(dir);
    const ModelConfig& c = model->config();
    std::vector<int32_t> prompt(prompt_len);
    for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 7919 + 13) % c.vocab_size;
    GenerateOptions o;
    o.max_tokens = tokens;
    o.kv_dtype = kv_dtype;
    o.sampling.temperature = 0;
    o.ignore_eos = true;
    generate(*model, prompt, {.max_tokens = 2, .sampling = o.sampling, .ignore_eos = true});  // warm the page cache
    GenerateResult r = generate(*model, prompt, o);
    const double decode_tps = (r.tokens.size() - 1) / r.decode_seconds;
    const double bytes_per_token = double(model->bytes_per_token());  // MoE: the selected experts only
    const DType kv = kv_cache_dtype(kv_dtype, *model);
    std::printf("model: %s, %lld parameters, isa %s, %d threads, bf16 activations %s, %s KV cache, %s attention\n",
                c.architecture.c_str(), (long long)model->parameter_count(), isa_name(best_isa()),
                global_pool().size(), matmul_bf16_activations(best_isa()) ? "on" : "off", dtype_name(kv),
                attention_products(best_isa(), kv) == AttnProducts::Bf16 ? "bf16" : "f32");
    std::printf("cpu: %s (%s; %s)\n", cpu_model_name().c_str(), cpu_key().c_str(), cpu_features_string().c_str());
    std::printf("amx: %s\n", matmul_amx_status().c_str());
    std::printf("prefill: %d tokens in %.3f s = %.1f tok/s\n", r.prompt_tokens, r.prefill_seconds,
                r.prompt_tokens / r.prefill_seconds);
    std::printf("decode: %zu tokens in %.3f s = %.2f tok/s (%.1f GB/s of weights streamed)\n",
                r.tokens.size() - 1, r.decode_seconds, decode_tps, decode_tps * bytes_per_token / 1e9);
    if (verify_costs) {
      // Best of 5: the prompt is prefilled, then T new tokens run in one forward
      // with logits for all of them (as a verification does).
      KVPool pool(model->kv_layout(), (prompt_len + 8 + 15) / 16, 16, model->backend(), kv);
      std::vector<float> lg(size_t(c.vocab_size) * 8);
      double t1 = 0;
      for (int T = 1; T <= 8; ++T) {
        double best = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
          SeqKV kv;
          MX_CHECK(kv.reserve(pool, prompt_len + T), "KV pool too small");
          Batch b;
          b.add(&kv, prompt.data(), prompt_len, 0, true);
          model->forward(b, pool, lg.data());
          std::vector<int32_t> t(T);
          for (int i = 0; i < T; ++i) t[i] = (i * 31 + 7) % c.vocab_size;
          b.clear();
          b.add(&kv, t.data(), T, prompt_len, false);
          for (int i = 0; i < T; ++i) b.logit_rows.push_back(i);
          const auto t0 = std::chrono::steady_clock::now();
          model->forward(b, pool, lg.data());
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          kv.release(pool);
        }
        if (T == 1) t1 = best;
        std::printf("forward of %d token(s) after the prompt: %.2f ms = %.2fx one token\n", T, best * 1e3, best / t1);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
