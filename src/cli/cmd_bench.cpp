// mxserve bench: a load generator against any OpenAI-compatible endpoint
// (--url), against `mxserve serve` started for the run (--launch-server), or
// against an engine in this process (--in-process). Writes OUT/<workload>.json
// and OUT/<workload>.svg per workload (devtools/loadgen/report.h defines every figure).
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "devtools/loadgen/load_generator.h"
#include "devtools/loadgen/report.h"
#include "devtools/loadgen/server_process.h"
#include "devtools/loadgen/target.h"
#include "devtools/loadgen/workload.h"
#include "cli/commands.h"
#include "cli/list_arg.h"
#include "cli/load_args.h"
#include "cli/parallel_args.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "formats/model_config.h"
#include "models/model.h"

namespace mx::cli {

namespace {
namespace fs = std::filesystem;

struct BenchArgs {
  std::string url, model, served_model, out = "bench-results", backend = "cpu";
  bool launch_server = false, in_process = false, no_progress = false;
  std::string workloads = "aa-single";
  double scale = 1.0;
  std::string input_len, output_len, concurrency;
  double shared_prefix = -1, request_rate = -1, duration = -1;
  int requests = -1, vocab = 0, threads = 0, gpus = 1, gpus_per_node = 1;
  uint64_t seed = 0;
  LoadOptions load;
  double price_per_hour = 0;
  std::vector<std::string> serve_args;
  EngineOptions engine;
};

std::vector<int> parse_int_list(const std::string& s, const char* what) {
  std::vector<int> out;
  for (const std::string& p : split_list(s)) {
    try {
      size_t used = 0;
      const int v = std::stoi(p, &used);
      if (used == p.size()) {
        out.push_back(v);
        continue;
      }
    } catch (const std::exception&) {
    }
    fail("{}: '{}' is not an integer", what, p);
  }
  MX_CHECK(!out.empty(), "{} needs at least one value", what);
  return out;
}

// The vocabulary prompts are drawn from: --vocab, else what the endpoint says
// (/v1/models "vocab_size", or the in-process engine), else the model's config.
int resolve_vocab(const BenchArgs& a, const bench::Target& t) {
  if (a.vocab) return a.vocab;
  if (t.vocab_size()) return t.vocab_size();
  if (!a.model.empty() && fs::exists(fs::path(a.model) / "config.json"))
    return load_hf_config((fs::path(a.model) / "config.json").string()).vocab_size;
  if (a.load.load_format == "dummy") return load_hf_config(a.model, a.load.hf_overrides).vocab_size;  // the config.json
  if (!a.model.empty()) return load_model(a.model)->config().vocab_size;  // e.g. a llama2.c .bin
  fail("cannot tell the endpoint's vocabulary size: pass --vocab (token ids are drawn from [3, vocab))");
}

bench::WorkloadSpec make_spec(const BenchArgs& a, const std::string& name, int vocab) {
  bench::WorkloadSpec w;
  if (name != "custom") w = bench::preset_workload(name, a.scale);
  w.name = name;
  if (!a.input_len.empty()) w.input = bench::LengthDist::parse(a.input_len);
  if (!a.output_len.empty()) w.output = bench::LengthDist::parse(a.output_len);
  if (a.shared_prefix >= 0) w.shared_prefix = a.shared_prefix;
  if (a.request_rate >= 0) w.request_rate = a.request_rate;
  if (!a.concurrency.empty()) w.concurrency = parse_int_list(a.concurrency, "--concurrency");
  if (a.requests >= 0) w.requests = a.requests;
  if (a.duration >= 0) w.duration_s = a.duration;
  w.vocab = vocab;
  w.seed = a.seed;
  w.validate();
  return w;
}

nlohmann::json spec_json(const bench::WorkloadSpec& w) {
  return {{"name", w.name},
          {"input_len", w.input.describe()},
          {"output_len", w.output.describe()},
          {"shared_prefix", w.shared_prefix},
          {"request_rate", w.request_rate},
          {"concurrency", w.concurrency},
          {"requests", w.requests},
          {"duration_s", w.duration_s},
          {"vocab", w.vocab},
          {"seed", w.seed}};
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
  MX_CHECK(f.good(), "cannot write {}", p.string());
}

int run_bench(BenchArgs& a) {
  const int modes = int(!a.url.empty()) + int(a.launch_server) + int(a.in_process);
  MX_CHECK(modes == 1, "pass exactly one of --url, --launch-server, --in-process");
  MX_CHECK(a.url.empty() || a.serve_args.empty(), "--serve-arg needs --launch-server");
  MX_CHECK(!(a.launch_server || a.in_process) || !a.model.empty(), "--launch-server and --in-process need --model");
  MX_CHECK(a.gpus >= 1 && a.gpus_per_node >= 1, "--gpus and --gpus-per-node must be >= 1");
  std::vector<std::string> names = split_list(a.workloads);
  MX_CHECK(!names.empty(), "--workload needs a name");
  for (const auto& n : names)
    if (n != "custom") bench::preset_workload(n, a.scale);  // unknown names fail before anything starts
  std::error_code ec;
  fs::create_directories(a.out, ec);
  MX_CHECK(fs::is_directory(a.out), "cannot create the output directory {}", a.out);

  std::unique_ptr<bench::ServerProcess> server;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<bench::Target> target;
  if (a.launch_server) {
    std::vector<std::string> sargs = {"--model", a.model, "--backend", a.backend};
    for (const std::string& x : load_option_args(a.load)) sargs.push_back(x);
    sargs.insert(sargs.end(), {"--kv-dtype", a.engine.kv_dtype});
    if (a.threads) sargs.insert(sargs.end(), {"--threads", std::to_string(a.threads)});
    sargs.insert(sargs.end(), a.serve_args.begin(), a.serve_args.end());
    const std::string log = (fs::path(a.out) / "server.log").string();
    std::fprintf(stderr, "bench: starting mxserve serve (log %s)\n", log.c_str());
    server = std::make_unique<bench::ServerProcess>(fs::read_symlink("/proc/self/exe").string(), sargs, log);
    target = bench::http_target(server->url(), a.served_model, 0);
  } else if (a.in_process) {
    if (a.threads) set_global_threads(a.threads);
    LoadOptions lo = a.load;
    lo.backend = a.backend;
    engine = std::make_unique<Engine>(load_model(a.model, lo), a.engine);
    engine->start();
    target = bench::engine_target(*engine);
  } else {
    target = bench::http_target(a.url, a.served_model, 0);
  }
  const int vocab = resolve_vocab(a, *target);
  const bench::CostModel cost{a.price_per_hour, a.gpus, a.gpus_per_node};
  bench::Progress progress(!a.no_progress);
  std::string all_failed;  // a point where no request succeeded

  for (const std::string& name : names) {
    const bench::WorkloadSpec w = make_spec(a, name, vocab);
    std::vector<bench::PointStats> stats;
    nlohmann::json points = nlohmann::json::array();
    const std::vector<int> sweep = w.request_rate > 0 ? std::vector<int>{0} : w.concurrency;
    for (size_t i = 0; i < sweep.size(); ++i) {
      const int n = w.request_rate > 0 ? std::max(1, w.requests ? w.requests : 16) : bench::default_requests(w, sweep[i]);
      const auto reqs = bench::make_requests(w, n, int(i));
      progress.start(fmt::format("{} {}", name, w.request_rate > 0 ? fmt::format("rate={:g}/s", w.request_rate)
                                                                    : fmt::format("c={}", sweep[i])),
                     n);
      const bench::PointResult p = bench::run_point(*target, reqs, sweep[i], w.request_rate, w.duration_s, progress);
      progress.finish();
      stats.push_back(bench::compute_stats(p, cost));
      if (stats.back().requests_ok == 0 && all_failed.empty())
        all_failed = fmt::format("{}: every request failed ({})", name, stats.back().first_error);
      points.push_back(bench::to_json(stats.back()));
      std::printf("%s %s\n", name.c_str(), bench::summary_line(stats.back()).c_str());
      std::fflush(stdout);
      if (!stats.back().timed())
        std::fprintf(stderr, "bench: warning: %s: %s\n", name.c_str(), stats.back().timing_warning.c_str());
    }
    nlohmann::json j = {{"mxserve_bench", 1},
                        {"date", utc_now()},
                        {"target", target->describe()},
                        {"mode", a.in_process ? "in-process" : a.launch_server ? "launch-server" : "url"},
                        {"model", a.model},
                        {"workload", spec_json(w)},
                        {"scale", a.scale},
                        {"cost", {{"price_per_hour", a.price_per_hour}, {"gpus", a.gpus}, {"gpus_per_node", a.gpus_per_node}}},
                        {"points", points}};
    const fs::path json_path = fs::path(a.out) / (name + ".json"), svg_path = fs::path(a.out) / (name + ".svg");
    write_file(json_path, j.dump(2) + "\n");
    write_file(svg_path, bench::throughput_svg(stats, fmt::format("mxserve bench {} ({})", name, target->describe())));
    std::printf("wrote %s and %s\n", json_path.c_str(), svg_path.c_str());
  }
  if (engine) engine->stop();
  if (server) server->stop();
  MX_CHECK(all_failed.empty(), "{}", all_failed);
  return 0;
}
}  // namespace

Command add_bench(CLI::App& app) {
  auto* s = app.add_subcommand("bench", "Load generator for OpenAI-compatible endpoints: throughput, latency, $/Mtok");
  auto a = std::make_shared<BenchArgs>();
  s->add_option("--url", a->url, "Endpoint to load, http://host:port (ours or another engine's)");
  s->add_flag("--launch-server", a->launch_server, "Start `mxserve serve --model M` on a free port for the run");
  s->add_flag("--in-process", a->in_process, "Drive an engine in this process (no HTTP)");
  s->add_option("--backend", a->backend, std::string(kBackendOptionHelp) + " (--in-process, --launch-server)")
      ->capture_default_str();
  s->add_option("--model", a->model, "Model for --launch-server / --in-process (also gives the vocabulary)");
  add_load_options(s, a->load);
  s->add_option("--served-model", a->served_model, "Model name to send (default: the first of /v1/models)");
  s->add_option("--workload", a->workloads, "aa-single, prefill-heavy or custom; a comma list runs each")
      ->capture_default_str();
  s->add_option("--scale", a->scale, "Multiply the presets' lengths (e.g. 0.01 for a small model on a CPU)")
      ->capture_default_str();
  s->add_option("--input-len", a->input_len, "Input length: N, uniform:A:B or normal:MEAN:SD[:MIN:MAX]");
  s->add_option("--output-len", a->output_len, "Output length, same forms");
  s->add_option("--shared-prefix", a->shared_prefix, "Fraction of each input shared by all requests [0, 1)")
      ->check(non_negative_validator());
  s->add_option("--request-rate", a->request_rate, "Poisson arrivals, requests/s (instead of fixed concurrency)")
      ->check(non_negative_validator());
  s->add_option("--concurrency", a->concurrency, "Fixed concurrency, a comma list sweeps (e.g. 1,2,4,8)");
  s->add_option("--requests", a->requests, "Requests per point (default 4 x concurrency)")->check(CLI::PositiveNumber);
  s->add_option("--duration", a->duration, "Seconds per point after which no request starts")
      ->check(non_negative_validator());
  s->add_option("--vocab", a->vocab, "Token ids are drawn from [3, vocab) (default: the model's vocabulary)")
      ->check(CLI::Range(4, 1 << 30));
  s->add_option("--seed", a->seed, "Workload seed")->capture_default_str()->check(seed_validator());
  s->add_option("--gpus", a->gpus, "Accelerators behind the endpoint (for tok/s per node)")->capture_default_str();
  s->add_option("--gpus-per-node", a->gpus_per_node, "Accelerators per node")->capture_default_str();
  s->add_option("--price-per-hour", a->price_per_hour, "Price of the whole deployment, $/hour (gives $/Mtok)")
      ->check(CLI::Range(0.0, 1e6));
  s->add_option("--out", a->out, "Directory for <workload>.json and <workload>.svg")->capture_default_str();
  s->add_option("--threads", a->threads, "Compute threads (in-process or launched server)")->check(CLI::Range(1, 1024));
  s->add_option("--serve-arg", a->serve_args, "Extra argument for the launched server (repeat), e.g. --serve-arg=--no-prefix-cache")
      ->allow_extra_args(false);
  s->add_option("--max-running", a->engine.max_running, "In-process engine: requests decoding at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  add_kv_dtype_option(s, a->engine.kv_dtype);
  s->add_option("--kv-blocks", a->engine.kv_blocks, "In-process engine: KV cache blocks (0: default)")
      ->check(CLI::Range(0, 1 << 26));
  s->add_flag("--no-progress", a->no_progress, "No progress bar");
  return {s, [a] { return run_bench(*a); }};
}

}  // namespace mx::cli
