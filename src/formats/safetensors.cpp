#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mx {

namespace {

// Largest header the reference implementation accepts (100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

int64_t checked_numel(const json& shape, const std::string& where) {
  if (!shape.is_array()) fail("{}: 'shape' is not an array", where);
  if (shape.size() > 4) fail("{}: rank {} > 4 is not supported", where, shape.size());
  int64_t n = 1;
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      fail("{}: shape entry {} is not a non-negative integer", where, d.dump());
    int64_t v = d.get<int64_t>();
    if (v != 0 && n > INT64_MAX / 8 / v) fail("{}: shape {} overflows", where, shape.dump());
    n *= v;
  }
  return n;
}

}  // namespace

void read_safetensors_file(const std::string& path, TensorStore& store) {
  read_safetensors_file(std::make_shared<MappedFile>(path), store);
}

void read_safetensors_file(std::shared_ptr<MappedFile> file, TensorStore& store) {
  const std::string& path = file->path();
  const size_t size = file->size();
  if (size < 8) fail("{}: file is {} bytes, too short for a safetensors header", path, size);
  uint64_t n;
  std::memcpy(&n, file->data(), 8);
  if (n > kMaxHeader) fail("{}: header length {} exceeds the {} byte limit", path, n, kMaxHeader);
  if (n > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes): truncated?", path, n,
         size);
  const char* hdr = reinterpret_cast<const char*>(file->data() + 8);
  if (n == 0 || hdr[0] != '{') fail("{}: header does not start with a JSON object", path);
  json j;
  try {
    j = json::parse(hdr, hdr + n);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: header is not a JSON object", path);

  const uint8_t* base = file->data() + 8 + n;
  const uint64_t buf_size = size - 8 - n;
  struct Range {
    uint64_t b, e;
    std::string name;
  };
  std::vector<Range> ranges;
  std::vector<std::pair<std::string, Tensor>> tensors;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail("{}: __metadata__ is not an object", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("{}: __metadata__ value for '{}' is not a string", path, m.key());
        store.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = fmt::format("{}: tensor '{}'", path, name);
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      fail("{} needs 'dtype', 'shape' and 'data_offsets'", where);
    if (!e["dtype"].is_string()) fail("{}: 'dtype' is not a string", where);
    auto dt = dtype_from_name(e["dtype"].get<std::string>());
    if (!dt) fail("{}: unsupported dtype '{}'", where, e["dtype"].get<std::string>());
    int64_t numel = checked_numel(e["shape"], where);
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail("{}: 'data_offsets' must be two non-negative integers", where);
    uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en) fail("{}: data_offsets [{}, {}] are reversed", where, b, en);
    if (en > buf_size)
      fail("{}: data_offsets end {} is past the data section ({} bytes): truncated file?", where,
           en, buf_size);
    uint64_t want = dtype_bytes(*dt, numel);
    if (en - b != want)
      fail("{}: {} bytes for dtype {} and shape {} but data_offsets span {} bytes", where, want,
           dtype_name(*dt), e["shape"].dump(), en - b);
    std::vector<int64_t> dims;
    for (const auto& d : e["shape"]) dims.push_back(d.get<int64_t>());
    // Safetensors never stores rank 0 as rank 1; keep the rank it says.
    tensors.emplace_back(name, Tensor(*dt, dims, const_cast<uint8_t*>(base + b)));
    ranges.push_back({b, en, name});
  }

  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) {
    return x.b != y.b ? x.b < y.b : x.e < y.e;
  });
  uint64_t cursor = 0;
  for (const auto& r : ranges) {
    if (r.b < cursor) fail("{}: tensor '{}' overlaps the previous tensor's data", path, r.name);
    if (r.b > cursor)
      fail("{}: {} unindexed bytes before tensor '{}' (the data section has a hole)", path,
           r.b - cursor, r.name);
    cursor = r.e;
  }
  if (cursor != buf_size)
    fail("{}: {} trailing bytes after the last tensor are not indexed", path, buf_size - cursor);

  for (auto& [name, t] : tensors) store.add(name, t, path);
  store.keep_alive(file);
}

TensorStore load_safetensors(const std::string& path) {
  TensorStore store;
  if (!fs::exists(path)) fail("model path {} does not exist", path);
  if (!fs::is_directory(path)) {
    read_safetensors_file(path, store);
    return store;
  }
  fs::path dir(path);
  fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    json j;
    try {
      std::ifstream in(index);
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing 'weight_map' object", index.string());
    std::map<std::string, std::string> wmap;
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) fail("{}: weight_map['{}'] is not a file name", index.string(), it.key());
      std::string f = it->get<std::string>();
      if (f.find('/') != std::string::npos || f == "..")
        fail("{}: weight_map['{}'] = '{}' is not a plain file name", index.string(), it.key(), f);
      wmap[it.key()] = f;
      files.insert(f);
    }
    for (const auto& f : files) read_safetensors_file((dir / f).string(), store);
    std::vector<std::string> problems;
    for (const auto& [name, f] : wmap) {
      if (!store.contains(name))
        problems.push_back(fmt::format("'{}' listed in the index but absent from {}", name, f));
      else if (fs::path(store.origin(name)).filename() != f)
        problems.push_back(fmt::format("'{}' listed in {} but stored in {}", name, f,
                                       store.origin(name)));
    }
    for (const auto& name : store.names())
      if (!wmap.count(name))
        problems.push_back(fmt::format("'{}' in {} but not in the index", name, store.origin(name)));
    if (!problems.empty()) {
      std::string msg = index.string() + " does not match its shards:";
      for (const auto& p : problems) msg += "\n  " + p;
      throw Error(msg);
    }
    return store;
  }
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      shards.push_back(e.path().string());
  if (shards.empty()) fail("{}: no .safetensors files and no model.safetensors.index.json", path);
  std::sort(shards.begin(), shards.end());
  for (const auto& s : shards) read_safetensors_file(s, store);
  return store;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json hdr = json::object();
  if (!metadata.empty()) hdr["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& nt : tensors) {
    MX_CHECK(!hdr.contains(nt.name) && nt.name != "__metadata__", "duplicate tensor name '{}'",
             nt.name);
    uint64_t bytes = nt.t.nbytes();
    hdr[nt.name] = {{"dtype", dtype_name(nt.t.dtype)},
                    {"shape", nt.t.dims()},
                    {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string h = hdr.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write {}", path);
  uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), std::streamsize(h.size()));
  for (const auto& nt : tensors)
    out.write(static_cast<const char*>(nt.t.data), std::streamsize(nt.t.nbytes()));
  if (!out) fail("error writing {}", path);
}

void write_safetensors_sharded(const std::string& dir, const std::vector<NamedTensor>& tensors,
                               size_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata) {
  fs::create_directories(dir);
  std::vector<std::vector<NamedTensor>> shards(1);
  size_t cur = 0;
  for (const auto& nt : tensors) {
    if (cur > 0 && cur + nt.t.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(nt);
    cur += nt.t.nbytes();
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, metadata);
    return;
  }
  json wmap = json::object();
  size_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(dir) / name).string(), shards[i], metadata);
    for (const auto& nt : shards[i]) {
      wmap[nt.name] = name;
      total += nt.t.nbytes();
    }
  }
  json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", wmap}};
  std::ofstream out(fs::path(dir) / "model.safetensors.index.json");
  out << idx.dump(2) << "\n";
  if (!out) fail("cannot write the index in {}", dir);
}

}  // namespace mx
