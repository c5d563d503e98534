// mxserve plan: ranks the TP x DP x EP layouts of one node for a model,
// an accelerator and a workload with the roofline model of devtools/planner/roofline.h.
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/atomic_output.h"
#include "devtools/loadgen/workload.h"
#include "cli/commands.h"
#include "core/error.h"
#include "formats/model_config.h"
#include "devtools/planner/hardware.h"
#include "devtools/planner/roofline.h"

namespace mx::cli {

namespace {
namespace fs = std::filesystem;

struct PlanArgs {
  std::string model, hardware, workload = "prefill-heavy", dtype = "bf16", json_out;
  double scale = 1.0, cached = -1, price = -1;
  int input = 0, output = 0, concurrency = 0, prefix_groups = 1, gpus = 0, top = 0, prefill_chunk = 8192;
  bool comm_bytes = false;
};

nlohmann::json to_json(const plan::Prediction& p) {
  return {{"layout", p.layout.name()},
          {"tp", p.layout.tp},
          {"dp", p.layout.dp},
          {"ep", p.layout.ep},
          {"fits", p.fits},
          {"why_not", p.why_not},
          {"weights_gb_per_gpu", p.weights_gb_per_gpu},
          {"kv_tokens_per_replica", p.kv_tokens_per_replica},
          {"prefix_hit_rate", p.hit_rate},
          {"prefill_s", p.prefill_s},
          {"prefill_compute_s", p.prefill_compute_s},
          {"prefill_mem_s", p.prefill_mem_s},
          {"prefill_comm_s", p.prefill_comm_s},
          {"prefill_tok_s", p.prefill_tok_s},
          {"prefill_tok_s_node", p.prefill_tok_s_node},
          {"batch_per_replica", p.batch},
          {"decode_step_s", p.decode_step_s},
          {"decode_mem_s", p.decode_mem_s},
          {"decode_compute_s", p.decode_compute_s},
          {"decode_comm_s", p.decode_comm_s},
          {"per_user_tok_s", p.per_user_tok_s},
          {"decode_tok_s_node", p.decode_tok_s_node},
          {"output_tok_s_node", p.output_tok_s_node},
          {"total_tok_s_node", p.total_tok_s_node},
          {"usd_per_mtok_total", p.usd_per_mtok_total},
          {"usd_per_mtok_output", p.usd_per_mtok_output}};
}

int run_plan(const PlanArgs& a) {
  // A report: an existing one is replaced, never the config or a file of the model (checked first).
  if (!a.json_out.empty()) {
    check_not_input(a.json_out, a.model, "--json");
    // A config.json given as a file: nor any file of its directory (model.safetensors ...).
    if (fs::is_regular_file(a.model)) check_not_input(a.json_out, fs::path(a.model).parent_path().string(), "--json");
  }
  fs::path cfg = a.model;
  if (fs::is_directory(cfg)) cfg /= "config.json";
  const ModelConfig mc = load_hf_config(cfg.string());
  const plan::ModelShape shape = plan::model_shape(mc);
  plan::Hardware hw = plan::find_hardware(a.hardware);
  if (a.gpus) hw.per_node = a.gpus;

  plan::PlanWorkload w;
  w.name = a.workload;
  if (a.workload != "custom") {
    const bench::WorkloadSpec s = bench::preset_workload(a.workload, a.scale);
    w.input = s.input.min;
    w.output = s.output.min;
    w.cached_fraction = s.shared_prefix;
    w.concurrency = *std::max_element(s.concurrency.begin(), s.concurrency.end());
  }
  if (a.input) w.input = a.input;
  if (a.output) w.output = a.output;
  if (a.cached >= 0) w.cached_fraction = a.cached;
  if (a.concurrency) w.concurrency = a.concurrency;
  w.prefix_groups = a.prefix_groups;
  MX_CHECK(w.input + w.output <= mc.max_position_embeddings || mc.max_position_embeddings == 0,
           "input + output ({}) exceeds the model's context of {}", w.input + w.output, mc.max_position_embeddings);

  plan::PlanOptions o;
  o.dtype = plan::parse_weight_dtype(a.dtype);
  o.price_per_gpu_hour = a.price >= 0 ? a.price : hw.price_per_hour;
  o.prefill_chunk = a.prefill_chunk;
  const auto ranked = plan::rank_layouts(shape, hw, w, o, mc.num_attention_heads);

  std::printf("model %s: %.2fB parameters, %.2fB active per token, %s weights; KV %.0f bytes/token\n",
              mc.architecture.c_str(), shape.total_params() / 1e9, shape.active_params() / 1e9, a.dtype.c_str(),
              shape.kv_bytes_per_token);
  std::printf("hardware %s x %d (%s); workload %s: %d in / %d out, %.0f%% cached, %d concurrent\n", hw.name.c_str(),
              hw.per_node, hw.source.c_str(), w.name.c_str(), w.input, w.output, 100 * w.cached_fraction,
              w.concurrency);
  std::printf("%-4s %-14s %-5s %8s %6s %12s %9s %10s %12s %12s %10s\n", "rank", "layout", "fits", "GB/gpu", "hit",
              "prefill t/s", "TTFT s", "user t/s", "output t/s", "total t/s", "$/Mtok");
  int rank = 0;
  for (const auto& p : ranked) {
    if (a.top && rank >= a.top) break;
    ++rank;
    std::printf("%-4d %-14s %-5s %8.1f %6.2f %12.0f %9.3f %10.1f %12.0f %12.0f %10s%s\n", rank,
                p.layout.name().c_str(), p.fits ? "yes" : "no", p.weights_gb_per_gpu, p.hit_rate,
                p.prefill_tok_s_node, p.prefill_s, p.per_user_tok_s, p.output_tok_s_node, p.total_tok_s_node,
                o.price_per_gpu_hour > 0 ? fmt::format("{:.4f}", p.usd_per_mtok_total).c_str() : "-",
                p.fits ? "" : ("  (" + p.why_not + ")").c_str());
  }
  std::printf("prefill t/s: prompt tokens/s of the node when all replicas prefill; TTFT: one request's prefill;\n"
              "user t/s: decode speed of one stream; output/total t/s: the workload on the whole node.\n");
  if (a.comm_bytes) {
    // Per layer, per token, over one replica's ranks, f32 as mxserve sends (devtools/planner/roofline.h
    // comm_bytes; `generate --comm-stats` measures the same counters).
    std::printf("comm bytes per token per layer, all ranks of a replica, f32 on the wire (mxserve's collectives):\n");
    int shown = 0;
    for (const auto& p : ranked) {
      if (a.top && shown >= a.top) break;
      ++shown;
      const plan::CommBytes c = plan::comm_bytes(shape, p.layout, 4.0);
      std::printf("  %-14s attn allreduce %.0f, ffn allreduce %.0f, moe all-to-all %.0f, moe allgather %.0f; "
                  "all %d layers %.0f\n",
                  p.layout.name().c_str(), c.attn_allreduce, c.ffn_allreduce, c.moe_all_to_all, c.moe_allgather,
                  shape.layers, c.per_token(shape, p.layout));
    }
  }
  if (!a.json_out.empty()) {
    nlohmann::json j = {{"model", a.model},
                        {"hardware", hw.name},
                        {"gpus", hw.per_node},
                        {"dtype", a.dtype},
                        {"workload",
                         {{"name", w.name}, {"input", w.input}, {"output", w.output},
                          {"cached_fraction", w.cached_fraction}, {"concurrency", w.concurrency},
                          {"prefix_groups", w.prefix_groups}}},
                        {"price_per_gpu_hour", o.price_per_gpu_hour},
                        {"layouts", nlohmann::json::array()}};
    for (const auto& p : ranked) j["layouts"].push_back(to_json(p));
    std::ofstream f(a.json_out);
    f << j.dump(2) << "\n";
    MX_CHECK(f.good(), "cannot write {}", a.json_out);
  }
  return 0;
}
}  // namespace

Command add_plan(CLI::App& app) {
  auto* s = app.add_subcommand("plan", "Roofline planner: rank TP x DP x EP layouts of one node by throughput and $/Mtok");
  auto a = std::make_shared<PlanArgs>();
  s->add_option("--model", a->model, "config.json (or a model directory holding one)")->required();
  s->add_option("--hardware", a->hardware, "mi355x | mi300x | b200 | b300 | h200 | h100 | cpu")->required();
  s->add_option("--workload", a->workload, "aa-single, prefill-heavy or custom")->capture_default_str();
  s->add_option("--scale", a->scale, "Multiply the preset's lengths")->capture_default_str();
  s->add_option("--input", a->input, "Input tokens per request")->check(CLI::Range(1, 1 << 24));
  s->add_option("--output", a->output, "Output tokens per request")->check(CLI::Range(1, 1 << 24));
  s->add_option("--cached-fraction", a->cached, "Fraction of the input served by the prefix cache")
      ->check(CLI::Range(0.0, 0.999));
  s->add_option("--concurrency", a->concurrency, "Requests in flight on the node")->check(CLI::Range(1, 1 << 20));
  s->add_option("--prefix-groups", a->prefix_groups, "Distinct shared prefixes (cache-aware routing splits them)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  s->add_option("--dtype", a->dtype, "Weight dtype: bf16 | fp8 | mxfp4")->capture_default_str();
  s->add_option("--price-per-hour", a->price, "$ per accelerator-hour (gives $/Mtok)")->check(CLI::Range(0.0, 1e6));
  s->add_option("--gpus", a->gpus, "Accelerators per node (default: the hardware's, 8; cpu 1)")
      ->check(CLI::Range(1, 1024));
  s->add_option("--prefill-chunk", a->prefill_chunk,
                "Tokens per prefill forward; weights are read once per chunk (mxserve serve: --step-tokens, 256)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  s->add_option("--top", a->top, "Print only the best N layouts")->check(CLI::Range(0, 1 << 20));
  s->add_option("--json", a->json_out, "Also write every prediction to this JSON file");
  s->add_flag("--comm-bytes", a->comm_bytes,
              "Also print each layout's communication bytes per token per layer (what --comm-stats measures)");
  return {s, [a] { return run_plan(*a); }};
}

}  // namespace mx::cli
