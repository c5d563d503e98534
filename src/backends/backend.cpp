// Backend selection and the parts of Backend every implementation shares.
#include "backends/backend.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "backends/gpu/gpu_backend.h"

namespace mx {

std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool);  // backends/cpu/cpu_backend.cpp

void Backend::matmul(float* y, const float* x, const DevWeight& w, int64_t n_tokens) {
  const bool gpu = is_gpu_isa(isa());
  const KernelConfig& cfg = kernel_config(gpu ? "gpu_matmul" : "matmul", w.dtype, w.out, w.in, isa());
  matmul_with_config(y, x, w, n_tokens, cfg);
}

void Backend::matmul_many(float* const* ys, const float* x, const DevWeight* const* ws, int n, int64_t n_tokens) {
  for (int i = 0; i < n; ++i) matmul(ys[i], x, *ws[i], n_tokens);
}

void Backend::moe_pairs(float*, const float*, const int32_t*, const int32_t*, int64_t, const ExpertWeights&,
                        const float*, float*, int64_t) {
  fail("backend {}: expert parallelism runs on the CPU backend only for now", name());
}

ExpertWeights ExpertWeights::stacked(const DevWeight& gate, const DevWeight& up, const DevWeight& down) {
  MX_CHECK(gate.experts == up.experts && gate.experts == down.experts, "expert stacks of {}, {} and {} experts",
           gate.experts, up.experts, down.experts);
  ExpertWeights w;
  auto split = [](const DevWeight& s, std::vector<DevWeight>& out) {
    for (int e = 0; e < s.experts; ++e) {
      DevWeight v = s;
      v.experts = 1;
      v.data = static_cast<char*>(s.data) + size_t(e) * s.data_bytes();
      if (s.scales) v.scales = static_cast<char*>(s.scales) + size_t(e) * s.scale_bytes();
      out.push_back(v);
    }
  };
  split(gate, w.gate);
  split(up, w.up);
  split(down, w.down);
  return w;
}

void DevArena::reserve(size_t bytes) {
  MX_CHECK(used_ == 0, "DevArena::reserve while in use");
  if (bytes > buf_.bytes()) buf_ = DevBuffer(*b_, std::max(bytes, buf_.bytes() * 2));
}

void DevArena::overflow(size_t need) const {
  fail("activation arena overflow: need {} bytes, capacity {}", need, buf_.bytes());
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> v{"cpu"};
#ifdef MXSERVE_HAVE_CUDA
  v.push_back("cuda");
#endif
#ifdef MXSERVE_HAVE_HIP
  v.push_back("hip");
#endif
  return v;
}

BackendSpec parse_backend_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  BackendSpec s{spec.substr(0, colon), 0};
  if (colon != std::string::npos) {
    const std::string n = spec.substr(colon + 1);
    MX_CHECK(!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos,
             "backend '{}': the device must be a number, as in cuda:0", spec);
    s.device = std::stoi(n);
  }
  return s;
}

int backend_device_count(const std::string& kind) {
  if (kind == "cpu") return 1;
#ifdef MXSERVE_HAVE_CUDA
  if (kind == "cuda") return gpu_cuda::device_count();
#endif
#ifdef MXSERVE_HAVE_HIP
  if (kind == "hip") return gpu_hip::device_count();
#endif
  return 0;
}

namespace {
std::map<std::string, BackendFactory>& registered() {
  static std::map<std::string, BackendFactory> m;
  return m;
}
}  // namespace

void register_backend(const std::string& kind, BackendFactory make) {
  MX_CHECK(kind != "cpu" && kind != "cuda" && kind != "hip", "backend kind '{}' is built in", kind);
  registered()[kind] = std::move(make);
}

std::unique_ptr<Backend> make_backend(const std::string& spec, ThreadPool* pool) {
  if (auto it = registered().find(spec); it != registered().end()) return it->second(pool);
  const auto [kind, device] = parse_backend_spec(spec);
  if (kind == "cpu") {
    MX_CHECK(device == 0, "backend '{}': the CPU backend has one device, cpu:0", spec);
    return make_cpu_backend(pool);
  }
  const std::vector<std::string> have = compiled_backends();
  if (kind != "cuda" && kind != "hip") fail("unknown backend '{}' (cpu, cuda[:N], hip[:N])", spec);
  if (std::find(have.begin(), have.end(), kind) == have.end())
    fail("backend '{}' is not compiled into this binary (rebuild with -DMXSERVE_{}=ON)", spec,
         kind == "cuda" ? "CUDA" : "HIP");
  const int n = backend_device_count(kind);
  MX_CHECK(device < n, "backend '{}': {} device(s) found{}", spec, n,
           n == 0 ? " (no GPU, or no driver)" : "");
#ifdef MXSERVE_HAVE_CUDA
  if (kind == "cuda") return gpu_cuda::make_backend(device);
#endif
#ifdef MXSERVE_HAVE_HIP
  if (kind == "hip") return gpu_hip::make_backend(device);
#endif
  fail("backend '{}' is not available", spec);
}

}  // namespace mx
