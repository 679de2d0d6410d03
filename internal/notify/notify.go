// Package notify tells systemd about the agent's state (sd_notify), for units
// of Type=notify. It writes datagrams to the socket named by $NOTIFY_SOCKET
// and does nothing when that variable is unset, so it is always safe to call.
package notify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// EnvSocket is the variable systemd sets to the notification socket.
const EnvSocket = "NOTIFY_SOCKET"

// writeTimeout bounds one notification: a full socket buffer (systemd not
// reading) must not hang the agent.
const writeTimeout = 5 * time.Second

// Ready tells systemd that start-up is finished (READY=1).
func Ready() error { return Send(os.Getenv(EnvSocket), "READY=1") }

// Stopping tells systemd that the agent is shutting down (STOPPING=1).
func Stopping() error { return Send(os.Getenv(EnvSocket), "STOPPING=1") }

// Status sets the one-line status systemctl shows (STATUS=...).
func Status(msg string) error { return Send(os.Getenv(EnvSocket), StatusState(msg)) }

// Extend asks systemd for d more time to start or stop before it gives up
// (EXTEND_TIMEOUT_USEC=...). It only has an effect while starting or stopping.
func Extend(d time.Duration) error {
	state, err := ExtendState(d)
	if err != nil {
		return err
	}
	return Send(os.Getenv(EnvSocket), state)
}

// StatusState is the STATUS= assignment for msg. Line breaks would start new
// assignments, so they become spaces.
func StatusState(msg string) string {
	return "STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(msg)
}

// ExtendState is the EXTEND_TIMEOUT_USEC= assignment for d.
func ExtendState(d time.Duration) (string, error) {
	if d < 0 {
		return "", fmt.Errorf("extending the systemd timeout by %s: negative duration", d)
	}
	return fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", d.Microseconds()), nil
}

// Send writes the newline-separated assignments states as one datagram to the
// notification socket at socket: an absolute path, or an abstract socket name
// starting with '@'. An empty socket means "not run by systemd": Send does
// nothing and returns nil.
func Send(socket string, states ...string) error {
	if socket == "" || len(states) == 0 {
		return nil
	}
	if !strings.HasPrefix(socket, "/") && !strings.HasPrefix(socket, "@") {
		return fmt.Errorf("notifying systemd at %q: unsupported socket address (want an absolute path or @abstract)", socket)
	}
	// The '@' of an abstract name is turned into the leading NUL byte by the
	// net package itself.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notifying systemd at %s: %w", socket, err)
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return fmt.Errorf("notifying systemd at %s: %w", socket, err)
	}
	msg := strings.Join(states, "\n")
	n, err := conn.Write([]byte(msg))
	if err == nil && n != len(msg) {
		err = errors.New("short write")
	}
	if err != nil {
		return fmt.Errorf("notifying systemd at %s: %w", socket, err)
	}
	return nil
}
