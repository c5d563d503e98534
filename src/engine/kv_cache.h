#pragma once
// Paged KV cache, in the memory of the backend the model runs on. One pool per model holds fixed-size blocks of `block_size`
// token slots for every layer (vLLM layout: the same block id indexes every
// layer's storage). A sequence owns a block table; position p lives in block
// table[p / block_size] at slot p % block_size. Blocks are reference counted so
// the prefix cache can share them between sequences.
//
// Each token slot stores k_width floats of "K" and v_width floats of "V" per
// layer: for GQA that is kv_heads * head_dim each; for MLA, which caches one
// compressed latent per token, v_width is 0.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace mx {

struct KVLayout {
  int n_layers = 0;
  int k_width = 0;  // floats per token per layer
  int v_width = 0;
};

class KVPool {
 public:
  // The storage is in `backend`'s memory (a model's Model::backend()), or host
  // memory when null.
  KVPool(const KVLayout& layout, int n_blocks, int block_size = 16, Backend* backend = nullptr);
  Backend* backend() const { return backend_; }

  const KVLayout& layout() const { return layout_; }
  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int free_blocks() const { return int(free_.size()); }

  // Returns a block id with refcount 1, or -1 when the pool is exhausted.
  int alloc();
  void retain(int block);
  void release(int block);  // frees the block when its count reaches 0
  int refcount(int block) const { return refs_[block]; }

  float* k(int layer, int block) {
    return k_ + (size_t(layer) * n_blocks_ + block) * block_size_ * layout_.k_width;
  }
  float* v(int layer, int block) {
    return v_ + (size_t(layer) * n_blocks_ + block) * block_size_ * layout_.v_width;
  }
  size_t bytes() const { return backend_ ? dev_storage_.bytes() : storage_.size(); }

 private:
  KVLayout layout_;
  int n_blocks_, block_size_;
  Backend* backend_ = nullptr;
  Buffer storage_;
  DevBuffer dev_storage_;
  float* k_ = nullptr;
  float* v_ = nullptr;
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
