#include "parallel/placement.h"

#include "backends/backend.h"
#include "core/error.h"

namespace mx {

std::string device_for_rank(const std::string& spec, int replica, int ranks_per_replica, int rank, int n_devices) {
  MX_CHECK(replica >= 0 && ranks_per_replica >= 1 && rank >= 0 && rank < ranks_per_replica,
           "device placement: replica {}, rank {} of {}", replica, rank, ranks_per_replica);
  const auto [kind, first] = parse_backend_spec(spec);
  if (kind != "cuda" && kind != "hip") return spec;  // the CPU, test backends: nothing to place
  const int index = first + replica * ranks_per_replica + rank;
  if (n_devices == 1 && first == 0) return kind + ":0";  // one device: every rank shares it
  MX_CHECK(n_devices <= 0 || index < n_devices,
           "replica {} rank {} needs {}:{} ({} ranks per replica from device {}), but {} {} device(s) were found",
           replica, rank, kind, index, ranks_per_replica, first, n_devices, kind);
  return kind + ":" + std::to_string(index);
}

}  // namespace mx
