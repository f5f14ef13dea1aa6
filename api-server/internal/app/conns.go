package app

import (
	"net"
	"net/http"
	"sync"
)

// newConns tracks the HTTP connections that have not sent a byte of a
// request yet (http.StateNew). http.Server.Shutdown waits up to five
// seconds for such a connection to send one, and HTTP clients open them
// speculatively (a dial that loses the race to an idle connection is kept
// unused in the client's pool), so a graceful stop would wait for
// connections that never carry work. Closing them at shutdown loses
// nothing: no request has been read from them.
type newConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is an http.Server ConnState hook.
func (n *newConns) track(c net.Conn, state http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if state == http.StateNew {
		if n.conns == nil {
			n.conns = map[net.Conn]struct{}{}
		}
		n.conns[c] = struct{}{}
		return
	}
	delete(n.conns, c)
}

// closeAll closes the connections still without a request.
func (n *newConns) closeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		_ = c.Close()
	}
	clear(n.conns)
}
