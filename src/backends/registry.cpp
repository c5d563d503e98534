// Tuned-kernel registry (see registry.h). The committed table is indexed once;
// every key ever looked up gets one Entry (never freed, so its address is stable)
// and each thread keeps a small direct-mapped cache of Entry pointers, so a lookup
// in steady state is a hash, a few compares and, for untuned keys, two relaxed
// atomic increments.
#include "backends/registry.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace mx {

namespace {

std::atomic<bool> g_strict{false};
std::atomic<uint64_t> g_fallbacks{0};

std::string key_string(std::string_view op, DType dt, int64_t out, int64_t in, Isa isa) {
  return fmt::format("{} {} [out={}, in={}] {}", op, dtype_name(dt), out, in, isa_name(isa));
}

struct Entry {
  std::string op;
  DType dtype;
  int64_t out, in;
  Isa isa;
  KernelConfig cfg;
  bool tuned = false;
  std::atomic<uint64_t> calls{0};
};

class Registry {
 public:
  static Registry& get() {
    static Registry r;
    return r;
  }

  // Runs once per distinct key (entry() caches it), so a scan is cheap enough.
  const KernelConfig* find(std::string_view op, DType dt, int64_t out, int64_t in, Isa isa) const {
    return find_kernel_config(tuned_table(), cpu_key(), op, dt, out, in, isa);
  }

  KernelConfig fallback(std::string_view op, DType dt, Isa isa) const {
    if (const KernelConfig* c = find(op, dt, 0, 0, isa)) return *c;
    return KernelConfig{};
  }

  // The Entry of a key, created on first use (that is when an untuned key warns).
  Entry* entry(std::string_view op, DType dt, int64_t out, int64_t in, Isa isa) {
    const std::string k = key_string(op, dt, out, in, isa);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(k);
    if (it != entries_.end()) return it->second;
    Entry& e = store_.emplace_back();
    e.op = std::string(op);
    e.dtype = dt;
    e.out = out;
    e.in = in;
    e.isa = isa;
    if (const KernelConfig* c = find(op, dt, out, in, isa)) {
      e.cfg = *c;
      e.tuned = true;
    } else {
      e.cfg = fallback(op, dt, isa);
      fmt::print(stderr,
                 "mxserve: warning: no tuned kernel config for {}; using the generic default "
                 "(mxserve tune --model M writes entries; see backends/cpu/tuned_configs.json)\n",
                 k);
    }
    entries_.emplace(k, &e);
    return &e;
  }

  std::vector<KernelShape> shapes(bool untuned_only) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<KernelShape> v;
    for (const Entry& e : store_)
      if (!untuned_only || !e.tuned)
        v.push_back({e.op, e.dtype, e.out, e.in, e.isa, e.calls.load(std::memory_order_relaxed)});
    return v;
  }

 private:
  Registry() = default;

  std::mutex mu_;
  std::deque<Entry> store_;  // stable addresses
  std::unordered_map<std::string, Entry*> entries_;
};

// Per-thread direct-mapped cache of Entry pointers.
struct CacheSlot {
  const Entry* e = nullptr;
};
constexpr size_t kCacheSlots = 64;
thread_local CacheSlot t_cache[kCacheSlots];

size_t slot_of(std::string_view op, DType dt, int64_t out, int64_t in, Isa isa) {
  uint64_t h = uint64_t(out) * 0x9E3779B97F4A7C15ull ^ uint64_t(in) * 0xC2B2AE3D27D4EB4Full;
  h ^= (uint64_t(dt) << 8 | uint64_t(isa)) * 0x165667B19E3779F9ull;
  h ^= op.size() * 0x27D4EB2F165667C5ull;
  return size_t(h >> 58) & (kCacheSlots - 1);
}

}  // namespace

const KernelConfig& kernel_config(std::string_view op, DType dtype, int64_t out, int64_t in,
                                  Isa isa) {
  CacheSlot& s = t_cache[slot_of(op, dtype, out, in, isa)];
  const Entry* e = s.e;
  if (!e || e->out != out || e->in != in || e->dtype != dtype || e->isa != isa || e->op != op)
    s.e = e = Registry::get().entry(op, dtype, out, in, isa);
  if (!e->tuned) {
    const_cast<Entry*>(e)->calls.fetch_add(1, std::memory_order_relaxed);
    g_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (g_strict.load(std::memory_order_relaxed))
      fail("strict kernels: no tuned kernel config for {} (add it to backends/cpu/tuned_configs.json, or pass "
           "--kernel-configs FILE written by mxserve tune --model M)",
           key_string(op, dtype, out, in, isa));
  }
  return e->cfg;
}

const KernelConfig* find_kernel_config(std::span<const TunedEntry> table, std::string_view cpu, std::string_view op,
                                       DType dtype, int64_t out, int64_t in, Isa isa) {
  const KernelConfig* any = nullptr;
  for (const TunedEntry& e : table)
    if (e.op == op && e.dtype == dtype && e.out == out && e.in == in && e.isa == isa) {
      if (e.cpu == cpu) return &e.cfg;
      if (e.cpu.empty()) any = &e.cfg;
    }
  return any;
}

const KernelConfig* find_tuned_config(std::string_view op, DType dtype, int64_t out, int64_t in,
                                      Isa isa) {
  return Registry::get().find(op, dtype, out, in, isa);
}

KernelConfig default_kernel_config(std::string_view op, DType dtype, Isa isa) {
  return Registry::get().fallback(op, dtype, isa);
}

void set_strict_kernels(bool strict) { g_strict.store(strict); }
bool strict_kernels() { return g_strict.load(); }

uint64_t kernel_fallback_count() { return g_fallbacks.load(std::memory_order_relaxed); }

std::vector<UntunedShape> untuned_shapes() { return Registry::get().shapes(true); }
std::vector<KernelShape> seen_kernel_shapes() { return Registry::get().shapes(false); }

std::string KernelShape::str() const { return key_string(op, dtype, out, in, isa); }

}  // namespace mx
