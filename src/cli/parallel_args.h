#pragma once
// --backend, --tp / --ep / --comm, shared by generate, logits and serve (parallel/parallel_model.h).
#include <CLI/CLI.hpp>

#include "parallel/parallel_model.h"

namespace mx::cli {

inline constexpr const char* kBackendOptionHelp =
    "Where the model runs: cpu, cuda[:N] or hip[:N] (weights, KV cache and every op of the forward on that device; "
    "with several ranks or --dp replicas, N is the first device: rank r of replica i uses N + i * ranks + r)";

inline void add_parallel_options(CLI::App* s, ParallelOptions& po) {
  s->add_option("--backend", po.device, kBackendOptionHelp)->capture_default_str();
  s->add_option("--tp", po.tp, "Tensor-parallel ranks (under mpirun: one per process; else threads)")
      ->check(CLI::Range(1, 256));
  s->add_option("--ep", po.ep, "Expert-parallel ranks for the MoE layers (1 or the same as --tp when both are set)")
      ->check(CLI::Range(1, 256));
  s->add_option("--comm", po.backend,
                "Communicator: auto (mpi under mpirun, else in-process threads), local, mpi, or nccl / rccl "
                "(device collectives on a GPU backend, one process per GPU under mpirun; docs/parallelism.md)");
  s->add_flag("--load-stats", po.load_stats,
              "Every rank prints what its loader read from the checkpoint and placed on its device, and its peak "
              "resident memory (stderr)");
}

}  // namespace mx::cli
