#include "devtools/loadgen/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/error.h"

namespace mx::bench {

int free_tcp_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  MX_CHECK(fd >= 0, "socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  MX_CHECK(ok, "could not find a free TCP port");
  return ntohs(a.sin_port);
}

ServerProcess::ServerProcess(const std::string& exe, const std::vector<std::string>& serve_args,
                             const std::string& log_path, double timeout_s) {
  port_ = free_tcp_port();
  std::vector<std::string> args = {exe, "serve", "--host", "127.0.0.1", "--port", std::to_string(port_)};
  args.insert(args.end(), serve_args.begin(), serve_args.end());
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MX_CHECK(log >= 0, "cannot write the server log {}", log_path);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log);
  MX_CHECK(pid_ > 0, "fork() failed");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      fail("mxserve serve exited before it was healthy (exit status {}); see {}",
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), log_path);
    }
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(1);
    auto res = cli.Get("/health");
    if (res && res->status == 200) return;
    if (std::chrono::steady_clock::now() > deadline) {
      stop();
      fail("mxserve serve was not healthy within {} s; see {}", timeout_s, log_path);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

ServerProcess::~ServerProcess() { stop(); }

std::string ServerProcess::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void ServerProcess::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {  // 10 s to drain, then kill
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace mx::bench
