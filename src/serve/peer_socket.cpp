// Peer liveness (see peer_socket.hpp).
#include "serve/peer_socket.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace deltafin::serve {

bool peer_has_closed(int socket_fd) {
  if (socket_fd < 0) return false;  // unknown: assume it is there
  char byte;
  const ssize_t n = recv(socket_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // the next request of a kept-alive connection
  if (n == 0) return true;  // end of file: the peer closed its end
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace deltafin::serve
