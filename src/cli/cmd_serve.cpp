// mxserve serve: the OpenAI-compatible HTTP server (server/http_server.h).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/access_args.h"
#include "cli/load_args.h"
#include "cli/parallel_args.h"
#include "cli/spec_args.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "tokenizer/model_tokenizer.h"
#include "models/model.h"
#include "server/dp_proxy.h"
#include "server/http_server.h"

namespace mx::cli {

namespace {
struct ServeArgs {
  std::string model, tokenizer, served_name;
  LoadOptions load;
  AccessArgs access;
  HttpLimitArgs http;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0;
  int http_threads = 0;
  int shutdown_timeout = 30;
  int max_body_mb = 8;
  bool no_prefix_cache = false;
  EngineOptions engine;
  SpecArgs spec;
  ParallelOptions par;
  int dp = 1;
  bool dp_round_robin = false;
  server::ApiLimits limits;
};

std::string default_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/"
  std::string name = p.filename().string();
  if (p.extension() == ".bin") name = p.stem().string();
  return name.empty() ? "model" : name;
}
// While the first SIGINT / SIGTERM drains in-flight requests, a second one
// quits at once (as vLLM's and llama.cpp's servers do).
void quit_on_second_signal(sigset_t sigs) {
  std::thread([sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "mxserve: second %s: exiting without waiting for in-flight requests\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::_Exit(128 + sig);
  }).detach();
}

server::ServerOptions server_options(const ServeArgs& a) {
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.served_model_name = a.served_name.empty() ? default_name(a.model) : a.served_name;
  so.max_body_bytes = size_t(a.max_body_mb) << 20;
  so.kv_block_size = a.engine.block_size;
  so.limits = a.limits;
  so.access = a.access.get(a.host);
  so.http_limits = a.http.get();
  if (std::filesystem::is_directory(a.model)) so.model_dir = a.model;
  so.http_threads = a.http_threads ? a.http_threads : std::min(1024, a.engine.max_running + a.engine.max_queue + 8);
  return so;
}

// --dp M: M in-process replicas (each its own engine, KV and prefix cache, and
// its own --tp/--ep ranks), each behind an HttpServer on a loopback port, with
// the cache-aware router (server/dp_proxy.h) on the public port: the same
// router that fronts `mxserve serve` processes on other hosts.
int serve_data_parallel(ServeArgs& a, sigset_t& sigs, const Tokenizer* tok, const server::ServerOptions& base) {
  MX_CHECK(!launched_by_mpi(), "--dp under mpirun is not supported: run one `mxserve serve` per replica "
                               "and `mxserve route` in front of them");
  struct Replica {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<server::HttpServer> http;
    std::thread thread;
  };
  std::vector<Replica> reps(a.dp);
  server::RouterServerOptions ro;
  ro.host = base.host;
  ro.port = base.port;
  ro.route.block_size = a.engine.block_size;
  ro.route.cache_aware = !a.dp_round_robin;
  ro.http_threads = base.http_threads;
  ro.access = base.access;
  ro.http_limits = base.http_limits;
  for (size_t i = 0; i < reps.size(); ++i) {
    Replica& r = reps[i];
    ParallelOptions po = a.par;
    po.replica = int(i);  // on a GPU backend: replica i's ranks on devices first + i * ranks.. (parallel/placement.h)
    auto model = load_parallel_model(a.model, po, a.load);
    r.engine = std::make_unique<Engine>(std::move(model), a.engine);
    server::ServerOptions so = base;
    so.host = "127.0.0.1";
    so.port = 0;
    so.access.api_keys.clear();  // loopback replicas: the router checks the keys
    r.http = std::make_unique<server::HttpServer>(*r.engine, tok, so);
    ro.replicas.push_back("http://127.0.0.1:" + std::to_string(r.http->bind()));
    r.engine->start();
    r.thread = std::thread([h = r.http.get()] { h->run(); });
  }
  server::RouterServer router(ro);
  const int port = router.bind();
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    quit_on_second_signal(sigs);
    router.shutdown();
  });
  std::fprintf(stderr, "mxserve: serving '%s' on http://%s:%d: %d data-parallel replicas, %s router\n",
               base.served_model_name.c_str(), base.host.c_str(), port, a.dp,
               a.dp_round_robin ? "round-robin" : "cache-aware");
  std::fflush(stderr);
  router.run();
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  for (auto& r : reps) {
    r.http->shutdown(std::chrono::seconds(a.shutdown_timeout));
    r.thread.join();
    r.engine->stop();
  }
  std::fprintf(stderr, "mxserve: stopped\n");
  return 0;
}
}  // namespace

Command add_serve(CLI::App& app) {
  auto* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  auto a = std::make_shared<ServeArgs>();
  s->add_option("--model", a->model, "Model directory (config.json + safetensors [+ tokenizer.json]), .gguf file (with its tokenizer) or llama2.c .bin")
      ->required();
  s->add_option("--tokenizer", a->tokenizer, kTokenizerOptionHelp);
  s->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  s->add_option("--port", a->port, "Port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  s->add_option("--served-model-name", a->served_name, "Model name clients send (default: the model's file name)");
  s->add_option("--max-running", a->engine.max_running, "Requests decoding at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  s->add_option("--max-queue", a->engine.max_queue, "Waiting requests beyond which the server answers 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  s->add_option("--kv-blocks", a->engine.kv_blocks, "KV cache blocks (0: enough for max-running full contexts, "
                                                    "at most 1 GiB)")
      ->check(CLI::Range(0, 1 << 26))
      ->capture_default_str();
  add_kv_dtype_option(s, a->engine.kv_dtype);
  s->add_option("--step-tokens", a->engine.step_tokens, "Token budget of one engine step")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  s->add_flag("--no-prefix-cache", a->no_prefix_cache, "Do not share prompt KV between requests");
  s->add_option("--threads", a->threads, "Compute threads (default: all cores)")->check(CLI::Range(1, 1024));
  s->add_option("--http-threads", a->http_threads,
                "Requests handled at once (default: max-running + max-queue + 8, at most 1024); waiting or idle "
                "connections take no thread")
      ->check(CLI::Range(1, 4096));
  s->add_option("--max-body-mb", a->max_body_mb, "Largest request body, MiB (larger: 413)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  a->spec.add(s);
  add_load_options(s, a->load);
  a->access.add(s);
  a->http.add(s);
  s->add_option("--max-tokens-limit", a->limits.max_tokens,
                "Largest max_tokens a request may ask for (larger: 400; 0: the context)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  s->add_option("--max-prompt-tokens", a->limits.max_prompt_tokens,
                "Longest prompt in tokens (longer: 400; 0: the context less one)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  s->add_option("--max-prompts", a->limits.max_prompts, "Prompts (choices) one /v1/completions request may carry")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  s->add_option("--shutdown-timeout", a->shutdown_timeout,
                "Seconds SIGINT/SIGTERM waits for in-flight requests before cancelling them")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  add_parallel_options(s, a->par);
  s->add_option("--dp", a->dp, "Data-parallel replicas in this process, behind the cache-aware router")
      ->check(CLI::Range(1, 64));
  s->add_flag("--dp-round-robin", a->dp_round_robin, "With --dp: route round-robin instead (the baseline)");
  return {s, [a] {
            // Signals go to one waiting thread; every thread started from here on inherits the mask.
            sigset_t sigs;
            sigemptyset(&sigs);
            sigaddset(&sigs, SIGINT);
            sigaddset(&sigs, SIGTERM);
            pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

            if (a->threads) set_global_threads(a->threads);
            a->engine.prefix_cache = !a->no_prefix_cache;
            a->engine.spec = a->spec.get();
            const ModelTokenizer mt = load_model_tokenizer(a->model, a->tokenizer);
            const Tokenizer* tok = mt.tokenizer.get();

            if (a->dp > 1) {
              return serve_data_parallel(*a, sigs, tok, server_options(*a));
            }
            // Under mpirun, ranks > 0 follow rank 0's forwards inside here and return null.
            auto model = load_parallel_model(a->model, a->par, a->load);
            if (!model) return 0;
            const ModelConfig& c = model->config();
            mt.check_fits(c.vocab_size);
            Engine engine(std::move(model), a->engine);

            const server::ServerOptions so = server_options(*a);
            server::HttpServer http(engine, tok, so);
            const int port = http.bind();
            engine.start();

            std::atomic<bool> signalled{false};
            std::thread waiter([&] {
              int sig = 0;
              sigwait(&sigs, &sig);
              signalled = true;
              quit_on_second_signal(sigs);
              std::fprintf(stderr, "mxserve: %s: finishing %d in-flight request(s) (at most %d s)\n",
                           sig == SIGINT ? "SIGINT" : "SIGTERM", http.in_flight(), a->shutdown_timeout);
              http.shutdown(std::chrono::seconds(a->shutdown_timeout));
            });
            std::fprintf(stderr, "mxserve: serving '%s' on http://%s:%d (%s)\n", so.served_model_name.c_str(),
                         so.host.c_str(), port,
                         tok ? ("tokenizer " + mt.path).c_str() : "no tokenizer: token-id prompts only");
            std::fflush(stderr);
            http.run();
            if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);  // run() ended on its own
            waiter.join();
            engine.stop();
            std::fprintf(stderr, "mxserve: stopped\n");
            return 0;
          }};
}

}  // namespace mx::cli
