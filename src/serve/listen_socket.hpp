// The listening socket of `deltafin serve`: SO_REUSEADDR (a restart binds while the last run's
// connections linger) and never SO_REUSEPORT, so that a second server on a port in use fails
// with one line naming the port instead of sharing it (and splitting requests between models).
#pragma once

#include <string>

namespace deltafin::serve {

// A socket listening on host:port (port 0: a free one, returned in bound_port); throws
// deltafin::Error naming the flag at fault when it cannot.
int listen_on(const std::string& host, int port, int& bound_port);

}  // namespace deltafin::serve
