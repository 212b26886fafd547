package plugin

import "time"

// SetHandshakeTimeout sets the handshake timeout and returns a func that
// restores it.
func SetHandshakeTimeout(d time.Duration) func() {
	old := handshakeTimeout
	handshakeTimeout = d
	return func() { handshakeTimeout = old }
}
