package coordinator

import (
	"fmt"
	"net"
)

// sdNotify sends state ("READY=1", "STOPPING=1") to systemd when the
// coordinator runs as a Type=notify service, and does nothing otherwise:
// sent is false with a nil error when socket is empty.
//
// socket is $NOTIFY_SOCKET. A leading '@' names a Linux abstract socket; the
// net package maps it to the leading NUL the kernel expects.
//
// The agent has the same few lines (agent/sdnotify.go). They are repeated
// rather than shared because neither package may import the other, and a
// package of its own for one datagram would be one more import rule.
func sdNotify(socket, state string) (sent bool, err error) {
	if socket == "" {
		return false, nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sd_notify %s: %w", socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sd_notify %s: %w", socket, err)
	}
	return true, nil
}
