#include "formats/llama2c.h"

#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/mapped_file.h"

namespace mx {

namespace {

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// Float count of the weights the header implies (without RoPE tables / classifier).
struct Layout {
  int64_t body_floats = 0, rope_floats = 0, cls_floats = 0;
  int64_t total_bytes() const { return 28 + 4 * (body_floats + rope_floats + cls_floats); }
};

bool header_sane(const Header& h) {
  auto ok = [](int32_t v) { return v > 0 && v <= (1 << 20); };
  return ok(h.dim) && ok(h.hidden_dim) && ok(h.n_layers) && ok(h.n_heads) && ok(h.n_kv_heads) &&
         h.vocab_size != 0 && std::abs(int64_t(h.vocab_size)) <= (1 << 22) && ok(h.seq_len) &&
         h.dim % h.n_heads == 0 && h.n_heads % h.n_kv_heads == 0 && (h.dim / h.n_heads) % 2 == 0;
}

Layout layout_of(const Header& h) {
  const int64_t dim = h.dim, hid = h.hidden_dim, L = h.n_layers, V = std::abs(int64_t(h.vocab_size));
  const int64_t hd = dim / h.n_heads, kv = hd * h.n_kv_heads;
  Layout l;
  l.body_floats = V * dim + L * (dim + dim * dim + 2 * kv * dim + dim * dim + dim + 3 * hid * dim) + dim;
  l.rope_floats = int64_t(h.seq_len) * hd;  // freq_cis_real + freq_cis_imag, seq_len * hd/2 each
  l.cls_floats = h.vocab_size < 0 ? V * dim : 0;
  return l;
}

bool read_header(const MappedFile& f, Header& h) {
  if (f.size() < sizeof(Header)) return false;
  std::memcpy(&h, f.data(), sizeof(Header));
  return header_sane(h) && int64_t(f.size()) == layout_of(h).total_bytes();
}

}  // namespace

bool looks_like_llama2c(const std::string& path) {
  MappedFile f(path);
  Header h;
  return read_header(f, h);
}

int llama2c_vocab_size(const std::string& path) {
  MappedFile f(path);
  Header h;
  if (!read_header(f, h)) fail("{}: not a llama2.c checkpoint", path);
  return int(std::abs(int64_t(h.vocab_size)));
}

ImportedModel import_llama2c(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  Header h;
  if (file->size() < sizeof(Header)) fail("{}: {} bytes is too short for a llama2.c header", path, file->size());
  std::memcpy(&h, file->data(), sizeof(Header));
  if (!header_sane(h))
    fail("{}: implausible llama2.c header (dim {}, hidden {}, layers {}, heads {}, kv heads {}, "
         "vocab {}, seq_len {})",
         path, h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size, h.seq_len);
  const Layout lay = layout_of(h);
  if (int64_t(file->size()) != lay.total_bytes())
    fail("{}: file is {} bytes but its header implies {} (truncated or not a llama2.c v0 file)",
         path, file->size(), lay.total_bytes());

  ImportedModel m;
  ModelConfig& c = m.config;
  c.arch = Arch::Llama;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_hidden_layers = h.n_layers;
  c.num_attention_heads = h.n_heads;
  c.num_key_value_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = std::abs(h.vocab_size);
  c.max_position_embeddings = h.seq_len;
  c.rms_norm_eps = 1e-5f;  // run.c hard-codes 1e-5
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = h.vocab_size > 0;
  c.bos_token_id = 1;
  // run.c stops when the model emits BOS (1), the delimiter it was trained with;
  // 2 is SentencePiece's EOS.
  c.eos_token_ids = {1, 2};
  c.torch_dtype = "float32";
  c.validate();

  const int64_t dim = h.dim, hid = h.hidden_dim, V = c.vocab_size;
  const int64_t hd = c.head_dim, kv = c.kv_dim();
  const float* p = reinterpret_cast<const float*>(file->data() + sizeof(Header));
  TensorStore& s = m.tensors;
  auto view = [&](std::vector<int64_t> dims) {
    Tensor t(DType::F32, dims, const_cast<float*>(p));
    p += t.numel();
    return t;
  };
  // llama2.c rotates adjacent pairs (x[2i], x[2i+1]); HF Llama rotates halves
  // (x[i], x[i + hd/2]). Permuting the rows of wq and wk within each head, as HF's
  // convert_llama_weights_to_hf.py does, makes the two identical: q.k is invariant
  // under the same permutation of both.
  auto permuted = [&](const Tensor& w, int64_t n_heads) {
    OwnedTensor o = OwnedTensor::make(DType::F32, w.dims());
    const int64_t cols = w.dim(1);
    for (int64_t hh = 0; hh < n_heads; ++hh)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          std::memcpy(o.t.as<float>() + (hh * hd + j * hd / 2 + i) * cols,
                      w.as<float>() + (hh * hd + 2 * i + j) * cols, cols * sizeof(float));
    return o;
  };
  auto per_layer = [&](const char* suffix, std::vector<int64_t> dims, bool permute = false,
                       int64_t heads = 0) {
    for (int l = 0; l < h.n_layers; ++l) {
      std::string name = fmt::format("model.layers.{}.{}", l, suffix);
      Tensor t = view(dims);
      if (permute)
        s.add_owned(name, permuted(t, heads), path);
      else
        s.add(name, t, path);
    }
  };
  s.add("model.embed_tokens.weight", view({V, dim}), path);
  per_layer("input_layernorm.weight", {dim});
  per_layer("self_attn.q_proj.weight", {dim, dim}, true, h.n_heads);
  per_layer("self_attn.k_proj.weight", {kv, dim}, true, h.n_kv_heads);
  per_layer("self_attn.v_proj.weight", {kv, dim});
  per_layer("self_attn.o_proj.weight", {dim, dim});
  per_layer("post_attention_layernorm.weight", {dim});
  per_layer("mlp.gate_proj.weight", {hid, dim});  // w1
  per_layer("mlp.down_proj.weight", {dim, hid});  // w2
  per_layer("mlp.up_proj.weight", {hid, dim});    // w3
  s.add("model.norm.weight", view({dim}), path);
  p += lay.rope_floats;  // legacy RoPE tables: recomputed, not read
  if (!c.tie_word_embeddings) s.add("lm_head.weight", view({V, dim}), path);
  s.keep_alive(file);
  return m;
}

}  // namespace mx
