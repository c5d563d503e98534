#pragma once
// Raw-socket HTTP/1.1 for the transport tests: what a careless or hostile
// client does (half-sent heads, dripping bytes, header floods, hanging up)
// that an HTTP client library would not.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace mxtest {

using Clock = std::chrono::steady_clock;

// The soft limit on open files raised to at least n (up to the hard limit); false if it cannot be.
inline bool raise_fd_limit(rlim_t n) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur >= n) return true;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < n) return false;
  r.rlim_cur = n;
  return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// What arrives until the server closes (or the timeout).
inline std::string read_until_close(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::string out;
  const auto end = Clock::now() + timeout;
  char buf[4096];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

// One whole response to a keep-alive request (head and Content-Length body).
inline std::string read_response(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::string out;
  const auto end = Clock::now() + timeout;
  char buf[4096];
  while (Clock::now() < end) {
    const size_t h = out.find("\r\n\r\n");
    if (h != std::string::npos) {
      const size_t cl = out.find("Content-Length: ");
      const size_t len = cl == std::string::npos ? 0 : std::stoul(out.substr(cl + 16));
      if (out.size() >= h + 4 + len) return out;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

inline int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

inline nlohmann::json body_of(const std::string& response) {
  const size_t h = response.find("\r\n\r\n");
  return h == std::string::npos ? nlohmann::json() : nlohmann::json::parse(response.substr(h + 4), nullptr, false);
}

// Whether the server has closed fd: what it sent is read and dropped, then EOF or a reset.
inline bool closed_by_server(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// One request on a fresh connection ("Connection: close"), the whole answer back.
inline std::string roundtrip(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  send_all(fd, request);
  std::string r = read_until_close(fd);
  ::close(fd);
  return r;
}

inline std::string get_with(const std::string& path, const std::string& extra_headers) {
  return "GET " + path + " HTTP/1.1\r\n" + extra_headers + "Connection: close\r\n\r\n";
}

}  // namespace mxtest
