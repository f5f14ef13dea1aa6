// Package freeport picks loopback ports for the servers a test starts as
// processes. It picks them outside the kernel's ephemeral range: a port
// inside it can be taken as the source port of an outgoing connection
// between the check and the listen of the process given it (seen: a
// worker's metrics port bound last, an api-server started after its
// database was created and migrated).
package freeport

import (
	"crypto/rand"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Ports returns the first of n consecutive loopback ports nothing listens
// on.
func Ports(t testing.TB, n int) int {
	t.Helper()
	lo, hi := portRange(n)
	for range 200 {
		var buf [2]byte
		_, _ = rand.Read(buf[:])
		base := lo + (int(buf[0])<<8|int(buf[1]))%(hi-lo)
		ok := true
		for i := range n {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			_ = ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("freeport: no free port range")
	return 0
}

// Addr returns a free loopback address (host:port).
func Addr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Ports(t, 1))
}

// portRange is where Ports picks n consecutive ports: below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), or above it when it
// starts too low.
func portRange(n int) (lo, hi int) {
	ephLo, ephHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if l, err := strconv.Atoi(f[0]); err == nil {
				ephLo = l
			}
			if h, err := strconv.Atoi(f[1]); err == nil {
				ephHi = h
			}
		}
	}
	if ephLo-n > 12000 {
		return 10000, ephLo - n
	}
	return ephHi + 1, 65535 - n
}
