#include "formats/gguf_writer.h"

#include "core/atomic_output.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "formats/gguf.h"

namespace mx {

namespace {
template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  const size_t n = b.size();
  b.resize(n + sizeof(T));
  std::memcpy(b.data() + n, &v, sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  MX_CHECK(alignment && (alignment & (alignment - 1)) == 0, "GGUF alignment {} is not a power of two", alignment);
  if (alignment != kGgufDefaultAlignment) add_u32("general.alignment", alignment);
}

bool GgufWriter::has_key(const std::string& k) const {
  return std::find(keys_.begin(), keys_.end(), k) != keys_.end();
}

void GgufWriter::key(const std::string& k, uint32_t type) {
  MX_CHECK(!has_key(k), "GGUF writer: key {} added twice", k);
  keys_.push_back(k);
  put_str(kv_, k);
  put<uint32_t>(kv_, type);
}

void GgufWriter::add_string(const std::string& k, const std::string& v) {
  key(k, uint32_t(GgufType::STRING));
  put_str(kv_, v);
}
void GgufWriter::add_u32(const std::string& k, uint32_t v) {
  key(k, uint32_t(GgufType::UINT32));
  put(kv_, v);
}
void GgufWriter::add_i32(const std::string& k, int32_t v) {
  key(k, uint32_t(GgufType::INT32));
  put(kv_, v);
}
void GgufWriter::add_f32(const std::string& k, float v) {
  key(k, uint32_t(GgufType::FLOAT32));
  put(kv_, v);
}
void GgufWriter::add_bool(const std::string& k, bool v) {
  key(k, uint32_t(GgufType::BOOL));
  put<uint8_t>(kv_, v ? 1 : 0);
}
void GgufWriter::add_string_array(const std::string& k, const std::vector<std::string>& v) {
  key(k, uint32_t(GgufType::ARRAY));
  put<uint32_t>(kv_, uint32_t(GgufType::STRING));
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_str(kv_, s);
}
void GgufWriter::add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  key(k, uint32_t(GgufType::ARRAY));
  put<uint32_t>(kv_, uint32_t(GgufType::INT32));
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}
void GgufWriter::add_f32_array(const std::string& k, const std::vector<float>& v) {
  key(k, uint32_t(GgufType::ARRAY));
  put<uint32_t>(kv_, uint32_t(GgufType::FLOAT32));
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}

void GgufWriter::add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& dims,
                            Producer produce) {
  const GgmlTypeInfo* ti = ggml_type_info(type);
  MX_CHECK(ti, "GGUF writer: {}: unknown ggml type {}", name, type);
  MX_CHECK(name.size() <= 63, "GGUF writer: tensor name {} is longer than ggml's 63 characters", name);
  MX_CHECK(!dims.empty() && dims.size() <= 4, "GGUF writer: {} has {} dims", name, dims.size());
  for (const auto& t : tensors_) MX_CHECK(t.name != name, "GGUF writer: tensor {} added twice", name);
  int64_t n = 1;
  for (int64_t d : dims) {
    MX_CHECK(d > 0, "GGUF writer: {} has a non-positive dim", name);
    n *= d;
  }
  MX_CHECK(dims[0] % ti->block_size == 0, "GGUF writer: {}: row length {} is not a multiple of {}'s block {}",
           name, dims[0], ti->name, ti->block_size);
  const uint64_t nbytes = uint64_t(n / ti->block_size) * ti->type_size;
  tensors_.push_back({name, type, dims, nbytes, data_size_, std::move(produce)});
  data_size_ = align_up(data_size_ + nbytes, alignment_);
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747);  // "GGUF"
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, keys_.size());
  head.insert(head.end(), kv_.begin(), kv_.end());
  for (const auto& t : tensors_) {
    put_str(head, t.name);
    put<uint32_t>(head, uint32_t(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(head, uint64_t(d));
    put<uint32_t>(head, t.type);
    put<uint64_t>(head, t.offset);
  }
  head.resize(align_up(head.size(), alignment_), 0);

  // A unique temporary beside the target, renamed into place once complete
  // (core/atomic_output.h): two converts to one path never interleave.
  AtomicFile f(path);
  std::vector<uint8_t> out;
  auto write_all = [&](const uint8_t* p, size_t n) {
    out.insert(out.end(), p, p + n);
    if (out.size() >= (size_t(64) << 20)) f.write(out.data(), out.size()), out.clear();
  };
  write_all(head.data(), head.size());
  std::vector<uint8_t> buf;
  uint64_t pos = 0;
  for (const auto& t : tensors_) {
    buf.clear();
    t.produce(buf);
    MX_CHECK(buf.size() == t.nbytes, "GGUF writer: {} produced {} bytes, expected {}", t.name, buf.size(), t.nbytes);
    const std::vector<uint8_t> zeros(t.offset - pos, 0);
    write_all(zeros.data(), zeros.size());
    write_all(buf.data(), buf.size());
    pos = t.offset + t.nbytes;
  }
  f.write(out.data(), out.size());
  f.commit();
}

}  // namespace mx
