#include "models/kv_cache.h"

namespace mx {

size_t KVPool::block_bytes(const KVLayout& layout, int block_size, DType dtype) {
  return size_t(layout.n_layers) * (layout.k_width + layout.v_width) * block_size * (dtype_bits(dtype) / 8);
}

KVPool::KVPool(const KVLayout& layout, int n_blocks, int block_size, Backend* backend, DType dtype)
    : layout_(layout), n_blocks_(n_blocks), block_size_(block_size), backend_(backend), dtype_(dtype) {
  MX_CHECK(n_blocks > 0 && block_size > 0, "KV pool needs positive block count and size");
  MX_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F8_E4M3,
           "KV cache dtype {}: F32, BF16 or F8_E4M3", dtype_name(dtype));
  const size_t per_layer = size_t(n_blocks) * block_size, es = dtype_bits(dtype) / 8;
  const size_t k_bytes = per_layer * layout.n_layers * layout.k_width * es;
  const size_t bytes = size_t(n_blocks) * block_bytes(layout, block_size, dtype);
  if (backend) {
    dev_storage_ = DevBuffer(*backend, bytes);
    k_ = dev_storage_.get<char>();
  } else {
    storage_ = Buffer(bytes);
    k_ = static_cast<char*>(storage_.data());
  }
  v_ = k_ + k_bytes;
  refs_.assign(n_blocks, 0);
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int KVPool::alloc() {
  if (free_.empty()) return -1;
  int b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void KVPool::retain(int block) {
  MX_CHECK(refs_[block] > 0, "retain of free KV block {}", block);
  ++refs_[block];
}

void KVPool::release(int block) {
  MX_CHECK(refs_[block] > 0, "release of free KV block {}", block);
  if (--refs_[block] == 0) free_.push_back(block);
}

bool SeqKV::reserve(KVPool& pool, int n) {
  const int bs = pool.block_size();
  const int need = (n + bs - 1) / bs - int(blocks.size());
  if (need <= 0) return true;
  if (pool.free_blocks() < need) return false;
  for (int i = 0; i < need; ++i) blocks.push_back(pool.alloc());
  return true;
}

void SeqKV::release(KVPool& pool) {
  for (int b : blocks) pool.release(b);
  blocks.clear();
  n_tokens = 0;
}

void SeqKV::truncate(KVPool& pool, int n) {
  if (n >= n_tokens) return;
  const int bs = pool.block_size();
  const size_t keep = size_t((n + bs - 1) / bs);
  while (blocks.size() > keep) {
    pool.release(blocks.back());
    blocks.pop_back();
  }
  n_tokens = n;
}

}  // namespace mx
