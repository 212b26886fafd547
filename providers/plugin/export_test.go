package plugin

import (
	"io"
	"strings"
	"time"
)

// SetHandshakeTimeout sets the handshake timeout and returns a func that
// restores it.
func SetHandshakeTimeout(d time.Duration) func() {
	old := handshakeTimeout
	handshakeTimeout = d
	return func() { handshakeTimeout = old }
}

// NotCarried lists the func fields the codec leaves out, with why.
var NotCarried = notCarried

// RoundTrip encodes v and decodes it into out, in one process.
func RoundTrip(v, out any) error {
	b, _, err := encode(v)
	if err != nil {
		return err
	}
	return decode(b, out, nil)
}

// Output runs f's program with args and stdin, and returns its output.
func (f *Found) Output(stdin string, args ...string) ([]byte, error) {
	cmd := f.command(args...)
	cmd.Stdin = strings.NewReader(stdin)
	return cmd.Output()
}

// SetStderr sends the programs' stderr to w and returns a func that
// restores it.
func SetStderr(w io.Writer) func() {
	old := stderr
	stderr = w
	return func() { stderr = old }
}
