#pragma once
// Helpers for tests that run models or edit checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "devtools/synthetic.h"

namespace mxtest {

// Writes a synthetic checkpoint of `arch` (tiny preset) into dir; returns dir.
inline std::string make_synthetic(const std::string& dir, const std::string& arch, mx::DType dt = mx::DType::F32,
                                  uint64_t seed = 0) {
  mx::SyntheticSpec s;
  s.arch = arch;
  s.dtype = dt;
  s.seed = seed;
  mx::write_synthetic_model(dir, s);
  return dir;
}

// Rewrites DIR/model.safetensors after edit(list, keep) changes the tensor list
// (keep owns any replacement data the edit creates).
template <typename F>
void rewrite_checkpoint(const std::string& dir, F edit) {
  std::vector<mx::NamedTensor> list;
  std::vector<mx::OwnedTensor> keep;
  {
    mx::TensorStore s = mx::load_safetensors(dir + "/model.safetensors");
    for (const auto& n : s.names()) {
      const mx::Tensor& t = s.get(n);
      keep.push_back(mx::OwnedTensor::make(t.dtype, t.dims()));
      std::memcpy(keep.back().t.data, t.data, t.nbytes());
      list.push_back({n, keep.back().t});
    }
  }
  edit(list, keep);
  mx::write_safetensors(dir + "/model.safetensors", list);
}

// Two sequences run in one batch give bitwise the logits each gives alone.
inline void expect_batch_matches_alone(mx::Model& m, const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const int V = m.config().vocab_size;
  auto la = mx::prompt_logits(m, a), lb = mx::prompt_logits(m, b);
  mx::KVPool pool(m.kv_layout(), 8, 16, m.backend());
  mx::SeqKV ka, kb;
  ASSERT_TRUE(ka.reserve(pool, int(a.size())) && kb.reserve(pool, int(b.size())));
  mx::Batch batch;
  batch.add(&kb, b.data(), int(b.size()), 0, true);
  batch.add(&ka, a.data(), int(a.size()), 0, true);
  std::vector<float> out(2 * V);
  m.forward(batch, pool, out.data());
  EXPECT_EQ(std::memcmp(out.data(), lb.data(), V * 4), 0);
  EXPECT_EQ(std::memcmp(out.data() + V, la.data(), V * 4), 0);
  EXPECT_EQ(ka.n_tokens, int(a.size()));
  EXPECT_EQ(kb.n_tokens, int(b.size()));
}

}  // namespace mxtest
