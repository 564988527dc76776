// Connection sockets by address, and peer liveness (see peer_socket.hpp).
#include "serve/peer_socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace deltafin::serve {
namespace {

// The numeric host and port of a socket address (as cpp-httplib reports them).
bool host_and_port(const sockaddr_storage& address, socklen_t length, std::string& host, int& port) {
  char name[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, name, sizeof(name), service, sizeof(service),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = name;
  port = std::atoi(service);
  return true;
}

}  // namespace

int find_connection_socket(int local_port, const std::string& remote_addr, int remote_port) {
  std::vector<int> open_fds;  // /dev/fd lists this process's descriptors (Linux and macOS)
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/fd", ec)) open_fds.push_back(std::atoi(entry.path().filename().c_str()));
  for (int fd : open_fds) {
    sockaddr_storage peer{}, local{};
    socklen_t peer_length = sizeof(peer), local_length = sizeof(local);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) continue;
    std::string peer_host, local_host;
    int peer_port = -1, port = -1;
    if (host_and_port(peer, peer_length, peer_host, peer_port) && host_and_port(local, local_length, local_host, port) &&
        peer_port == remote_port && port == local_port && peer_host == remote_addr)
      return fd;
  }
  return -1;
}

bool peer_has_closed(int socket_fd) {
  if (socket_fd < 0) return false;  // unknown: assume it is there
  char byte;
  const ssize_t n = recv(socket_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // the next request of a kept-alive connection
  if (n == 0) return true;  // end of file: the peer closed its end
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace deltafin::serve
