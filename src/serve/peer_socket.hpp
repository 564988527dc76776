// Whether an HTTP client is still there. cpp-httplib 0.11 does not give handlers the connection's
// socket, so it is found by its addresses (the connected socket whose local and peer ports are
// the request's); a peer that has closed its end reads as end-of-file without consuming anything.
#pragma once

#include <string>

namespace deltafin::serve {

// The socket of the connection local_port <- remote_addr:remote_port, or -1.
int find_connection_socket(int local_port, const std::string& remote_addr, int remote_port);

// True when the peer has closed the connection (or it failed); false while it is open.
bool peer_has_closed(int socket_fd);

}  // namespace deltafin::serve
