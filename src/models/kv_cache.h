#pragma once
// Paged KV cache, in the memory of the backend the model runs on. One pool per model holds fixed-size blocks of `block_size`
// token slots for every layer (vLLM layout: the same block id indexes every
// layer's storage). A sequence owns a block table; position p lives in block
// table[p / block_size] at slot p % block_size. Blocks are reference counted so
// the prefix cache can share them between sequences.
//
// Each token slot stores k_width values of "K" and v_width values of "V" per
// layer: for GQA that is kv_heads * head_dim each; for MLA, which caches one
// compressed latent per token, v_width is 0. Values are f32, bf16 or fp8 E4M3
// (--kv-dtype, engine/kv_cache.h; backends/backend.h PagedKV).
//
// In models/ because the model's forward reads and writes it (Model::forward,
// the attention blocks); the engine allocates and schedules it.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "backends/backend.h"

namespace mx {

struct KVLayout {
  int n_layers = 0;
  int k_width = 0;  // floats per token per layer
  int v_width = 0;
};

class KVPool {
 public:
  // The storage is in `backend`'s memory (a model's Model::backend()), or host
  // memory when null; values of `dtype` (F32, BF16 or F8_E4M3).
  KVPool(const KVLayout& layout, int n_blocks, int block_size = 16, Backend* backend = nullptr,
         DType dtype = DType::F32);
  Backend* backend() const { return backend_; }
  DType dtype() const { return dtype_; }
  // Bytes of one block across every layer (K and V).
  static size_t block_bytes(const KVLayout& layout, int block_size, DType dtype);

  const KVLayout& layout() const { return layout_; }
  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int free_blocks() const { return int(free_.size()); }

  // Returns a block id with refcount 1, or -1 when the pool is exhausted.
  int alloc();
  void retain(int block);
  void release(int block);  // frees the block when its count reaches 0
  int refcount(int block) const { return refs_[block]; }

  // Layer `layer`'s cache as the attention kernels take it.
  PagedKV layer(int layer) {
    const size_t es = size_t(dtype_bits(dtype_) / 8), per_layer = size_t(n_blocks_) * block_size_;
    return {k_ + size_t(layer) * per_layer * layout_.k_width * es,
            layout_.v_width ? v_ + size_t(layer) * per_layer * layout_.v_width * es : nullptr, layout_.k_width,
            layout_.v_width, block_size_, dtype_};
  }
  size_t bytes() const { return backend_ ? dev_storage_.bytes() : storage_.size(); }

 private:
  KVLayout layout_;
  int n_blocks_, block_size_;
  Backend* backend_ = nullptr;
  DType dtype_ = DType::F32;
  Buffer storage_;
  DevBuffer dev_storage_;
  char* k_ = nullptr;
  char* v_ = nullptr;
  std::vector<int> refs_;
  std::vector<int> free_;
};

// The KV state of one sequence: its block table and how many positions hold K/V.
struct SeqKV {
  std::vector<int> blocks;
  int n_tokens = 0;

  int capacity(int block_size) const { return int(blocks.size()) * block_size; }
  // Grows the table to hold n positions; false if the pool ran out (nothing is
  // taken then).
  bool reserve(KVPool& pool, int n);
  // Releases every block back to the pool.
  void release(KVPool& pool);
  // Drops positions >= n (speculative rollback); frees whole blocks past them.
  void truncate(KVPool& pool, int n);
};

}  // namespace mx
