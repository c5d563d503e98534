#pragma once
// The loader that never guesses. A model asks for each parameter by its
// checkpoint name with the shape and dtypes it accepts; at the end, finish()
// checks that every tensor of the checkpoint was consumed or matched by an
// explicit ignore rule. All problems are collected and reported together,
// grouped as missing / unused / wrong shape / wrong dtype, so one run tells
// the user everything that is wrong with a checkpoint.
#include <initializer_list>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/tensor_store.h"
#include "models/dummy_weights.h"
#include "comm/shard.h"
#include "quant/quant_config.h"

namespace mx {

struct BoundParam {
  std::string checkpoint_name;
  std::string param;  // what the model uses it as, e.g. "model.layers.3.self_attn.wq"
  DType dtype;
  std::string shape;
  std::string linear;  // the Linear layer's name when this is its weight (or scale)
  int64_t params = 0;  // model parameters it holds (logical elements; 0 for scales)
};

class WeightBinder {
 public:
  // quant: the checkpoint's quantization_config; every Linear must be stored
  // exactly as it says (quantized unless excluded), never silently otherwise.
  explicit WeightBinder(const TensorStore& store, const QuantConfig& quant = {})
      : store_(store), quant_(quant) {}

  // A required parameter. Returns an empty Tensor when it is missing or wrong
  // (the error is recorded; finish() throws).
  Tensor need(const std::string& name, const std::string& param, std::vector<int64_t> shape,
              std::initializer_list<DType> dtypes);
  // The weight of a Linear layer, `prefix.weight` [out, in]. Every projection
  // goes through here, so quantized checkpoints are handled in one place:
  // MXFP4 (Quark): prefix.weight U8 [out, in/2] + prefix.weight_scale U8 [out, in/32];
  // FP8: prefix.weight F8_E4M3 [out, in] + prefix.weight_scale_inv F32 [ceil(out/128), ceil(in/128)].
  // The returned Tensor has the logical shape [out, in] and, when quantized, scales.
  Tensor linear(const std::string& prefix, const std::string& param, int64_t out, int64_t in);

  // A parameter that may be absent (e.g. lm_head with tied embeddings); when
  // present it must be right.
  Tensor optional(const std::string& name, const std::string& param, std::vector<int64_t> shape,
                  std::initializer_list<DType> dtypes);
  // Tensors the model deliberately does not use (e.g. rotary_emb.inv_freq);
  // a regex matched against the whole name.
  void ignore(const std::string& regex, const std::string& why);

  // This rank's cut of the model (comm/shard.h): blocks read it to bind
  // only their slice. Unsharded unless set.
  const ShardPlan& shard() const { return shard_ ? *shard_ : no_shard_; }
  void set_shard(const ShardPlan* plan) { shard_ = plan; }

  // --load-format dummy (models/dummy_weights.h): from now on every required
  // parameter that `store` (the store this binder reads) lacks is first made
  // by `dummy` and added to it: a Linear layer as the quantization_config says
  // (MXFP4 / FP8 layouts) or else in `plain` (F32 or BF16), other matrices in
  // `plain`, vectors in F32. Optional parameters stay absent.
  void make_missing(TensorStore& store, DummyWeights& dummy, DType plain);
  // t with its bytes in host memory (dummy placeholders made now), for blocks
  // that prepare a weight on the host (MLA's absorption); t itself otherwise.
  Tensor on_host(const Tensor& t);

  // Throws mx::Error listing every problem; otherwise returns the mapping.
  const std::vector<BoundParam>& finish();

 private:
  Tensor bind(const std::string& name, const std::string& param, std::vector<int64_t> shape,
              std::initializer_list<DType> dtypes, bool required);

  void make_dummy(const std::string& name, const std::vector<int64_t>& shape, std::initializer_list<DType> dtypes);
  void make_dummy_linear(const std::string& prefix, int64_t out, int64_t in, bool quantized);

  const TensorStore& store_;
  TensorStore* dummy_store_ = nullptr;
  DummyWeights* dummy_ = nullptr;
  DType dummy_plain_ = DType::BF16;
  std::set<std::string> used_;
  std::vector<std::pair<std::regex, std::string>> ignores_;
  const QuantConfig& quant_;
  std::vector<std::string> missing_, wrong_shape_, wrong_dtype_, quant_mismatch_;
  std::vector<BoundParam> bound_;
  const ShardPlan* shard_ = nullptr;
  ShardPlan no_shard_;
};

}  // namespace mx
