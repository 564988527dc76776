// Whether an HTTP client is still there: a peer that has closed its end of the connection reads
// as end-of-file, seen without consuming anything (MSG_PEEK).
#pragma once

namespace deltafin::serve {

// True when the peer has closed the connection (or it failed); false while it is open.
bool peer_has_closed(int socket_fd);

}  // namespace deltafin::serve
