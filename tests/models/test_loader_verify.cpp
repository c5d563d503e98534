// The loader never guesses: a checkpoint with a tensor removed, renamed or
// retyped is an error that names it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "devtools/synthetic.h"
#include "model_test_util.h"
#include "test_util.h"

using namespace mx;

namespace {

// Rewrites the single-file checkpoint in dir through `edit`.
template <typename F>
void rewrite(const mxtest::TempDir& d, F edit) {
  mxtest::rewrite_checkpoint(d.path().string(), edit);
}

std::string load_error(const mxtest::TempDir& d) {
  try {
    load_model(d.path().string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void make(const mxtest::TempDir& d, const char* arch = "qwen3") {
  SyntheticSpec s;
  s.arch = arch;
  s.dtype = DType::F32;
  write_synthetic_model(d.path().string(), s);
}

}  // namespace

TEST(LoaderVerify, CleanCheckpointLoadsAndMapsEveryTensor) {
  mxtest::TempDir d;
  make(d);
  auto m = load_model(d.path().string());
  TensorStore s = load_safetensors(d.path().string());
  EXPECT_EQ(m->weight_map().size(), s.size());
}

TEST(LoaderVerify, RemovedTensorIsReportedMissing) {
  mxtest::TempDir d;
  make(d);
  rewrite(d, [](auto& list, auto&) {
    std::erase_if(list, [](const NamedTensor& n) { return n.name == "model.layers.1.self_attn.k_norm.weight"; });
  });
  std::string e = load_error(d);
  EXPECT_NE(e.find("missing tensors (1)"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.1.self_attn.k_norm.weight"), std::string::npos) << e;
}

TEST(LoaderVerify, RenamedTensorIsMissingAndUnused) {
  mxtest::TempDir d;
  make(d);
  rewrite(d, [](auto& list, auto&) {
    for (auto& n : list)
      if (n.name == "model.layers.0.mlp.up_proj.weight") n.name = "model.layers.0.mlp.upproj.weight";
  });
  std::string e = load_error(d);
  EXPECT_NE(e.find("missing tensors"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("unused tensors"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.mlp.upproj.weight"), std::string::npos) << e;
}

TEST(LoaderVerify, RetypedTensorIsReportedWithBothDtypes) {
  mxtest::TempDir d;
  make(d);
  rewrite(d, [](auto& list, auto& keep) {
    for (auto& n : list)
      if (n.name == "model.norm.weight") {
        keep.push_back(OwnedTensor::make(DType::I32, n.t.dims()));
        n.t = keep.back().t;
      }
  });
  std::string e = load_error(d);
  EXPECT_NE(e.find("wrong dtype"), std::string::npos) << e;
  EXPECT_NE(e.find("model.norm.weight: expected F32|BF16, found I32"), std::string::npos) << e;
}

TEST(LoaderVerify, ReshapedTensorIsReportedWithBothShapes) {
  mxtest::TempDir d;
  make(d, "llama");
  rewrite(d, [](auto& list, auto& keep) {
    for (auto& n : list)
      if (n.name == "model.layers.0.self_attn.o_proj.weight") {
        keep.push_back(OwnedTensor::make(DType::F32, {n.t.dim(0), n.t.dim(1) / 2}));
        n.t = keep.back().t;
      }
  });
  std::string e = load_error(d);
  EXPECT_NE(e.find("wrong shape"), std::string::npos) << e;
  EXPECT_NE(e.find("o_proj.weight: expected [64, 64], found [64, 32]"), std::string::npos) << e;
}

TEST(LoaderVerify, ExtraTensorIsUnused) {
  mxtest::TempDir d;
  make(d, "llama");
  rewrite(d, [](auto& list, auto& keep) {
    keep.push_back(OwnedTensor::make(DType::F32, {4}));
    list.push_back({"model.layers.2.mlp.gate_proj.weight", keep.back().t});
  });
  std::string e = load_error(d);
  EXPECT_NE(e.find("unused tensors (1)"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.2.mlp.gate_proj.weight"), std::string::npos) << e;
}
