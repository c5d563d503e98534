#pragma once
// --auto-tune: kernel configs measured on this machine for the model, made on
// first use. The first run with a model runs `mxserve tune --model M` for the
// best ISA in a child process (seconds: the model's few distinct shapes) and keeps
// its file in the cache; later runs read it. A child, because the tuned table is
// fixed once the first kernel runs, and tuning runs the model.
#include <string>

namespace mx::cli {

// The cache folder: $MXSERVE_CACHE_DIR, else $XDG_CACHE_HOME/mxserve, else
// $HOME/.cache/mxserve.
std::string tune_cache_dir();

// The kernel config file for `model` on this machine (cpu_key(), best_isa(),
// the bf16-activation setting, the pool's thread count): the cached one, or a
// new one tuned now. Empty, after a warning on stderr, when the cache folder or
// the tuning failed (the run goes on with the built-in table); an error only
// when the model path does not exist.
std::string auto_tune_file(const std::string& model);

}  // namespace mx::cli
