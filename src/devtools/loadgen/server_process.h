#pragma once
// `mxserve bench --launch-server`: runs `mxserve serve` as a child process on a
// free port, waits for /health, and stops it (SIGTERM, then SIGKILL) when done.
#include <sys/types.h>

#include <string>
#include <vector>

namespace mx::bench {

class ServerProcess {
 public:
  // exe: the mxserve binary; serve_args after "serve" (--model ... etc.);
  // the child's stdout/stderr go to log_path. mx::Error when it exits or is
  // not healthy within timeout_s.
  ServerProcess(const std::string& exe, const std::vector<std::string>& serve_args, const std::string& log_path,
                double timeout_s = 600);
  ~ServerProcess();  // stop()
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::string url() const;
  int port() const { return port_; }
  void stop();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

int free_tcp_port();  // a port 127.0.0.1 could bind just now (the kernel's pick)

}  // namespace mx::bench
