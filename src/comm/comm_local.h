#pragma once
// In-process communicator: `size` ranks are threads of one process sharing
// memory. A collective publishes each rank's buffer pointer, meets at a
// barrier, copies straight from the peers' buffers, and meets again (so no
// buffer is reused while a peer still reads it). send/recv go through per-pair
// mailboxes. One host only; comm_mpi.h is the multi-process backend.
#include <memory>
#include <vector>

#include "comm/comm.h"

namespace mx {

// The shared state of one in-process group; make its communicators with
// make_local_comms(n) and hand one to each thread.
struct LocalGroup;
std::vector<std::unique_ptr<Comm>> make_local_comms(int n);

}  // namespace mx
