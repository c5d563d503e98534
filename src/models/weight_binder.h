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
#include "io/tensor_store.h"

namespace mx {

struct BoundParam {
  std::string checkpoint_name;
  std::string param;  // what the model uses it as, e.g. "layers[3].attn.wq"
  DType dtype;
  std::string shape;
};

class WeightBinder {
 public:
  explicit WeightBinder(const TensorStore& store) : store_(store) {}

  // A required parameter. Returns an empty Tensor when it is missing or wrong
  // (the error is recorded; finish() throws).
  Tensor need(const std::string& name, const std::string& param, std::vector<int64_t> shape,
              std::initializer_list<DType> dtypes);
  // The weight of a Linear layer, `prefix.weight` [out, in]. Every projection
  // goes through here, so quantized checkpoints (which store a Linear as packed
  // data plus block scales) are handled in one place.
  Tensor linear(const std::string& prefix, const std::string& param, int64_t out, int64_t in);

  // A parameter that may be absent (e.g. lm_head with tied embeddings); when
  // present it must be right.
  Tensor optional(const std::string& name, const std::string& param, std::vector<int64_t> shape,
                  std::initializer_list<DType> dtypes);
  // Tensors the model deliberately does not use (e.g. rotary_emb.inv_freq);
  // a regex matched against the whole name.
  void ignore(const std::string& regex, const std::string& why);

  // Throws mx::Error listing every problem; otherwise returns the mapping.
  const std::vector<BoundParam>& finish();

 private:
  Tensor bind(const std::string& name, const std::string& param, std::vector<int64_t> shape,
              std::initializer_list<DType> dtypes, bool required);

  const TensorStore& store_;
  std::set<std::string> used_;
  std::vector<std::pair<std::regex, std::string>> ignores_;
  std::vector<std::string> missing_, wrong_shape_, wrong_dtype_;
  std::vector<BoundParam> bound_;
};

}  // namespace mx
