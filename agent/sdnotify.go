package agent

import (
	"fmt"
	"net"
)

// sdNotify sends state ("READY=1", "STOPPING=1") to systemd when the agent
// runs as a Type=notify service, and does nothing otherwise: sent is false
// with a nil error when socket is empty, as go-systemd's SdNotify answers.
//
// socket is $NOTIFY_SOCKET. A leading '@' names a Linux abstract socket; the
// net package maps it to the leading NUL the kernel expects.
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
