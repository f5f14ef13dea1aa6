package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPorts: the ports are free, consecutive and outside the ephemeral
// range.
func TestPorts(t *testing.T) {
	lo, hi := portRange(3)
	base := Ports(t, 3)
	if base < lo || base >= hi {
		t.Fatalf("base %d outside [%d, %d)", base, lo, hi)
	}
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
		if err != nil {
			t.Fatalf("port %d not free: %v", base+i, err)
		}
		_ = ln.Close()
	}
}
