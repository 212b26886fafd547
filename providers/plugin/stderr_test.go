package plugin_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/providers/plugin"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStderrAndPanicsAreScrubbed: a program given a sensitive value that
// prints it on stderr (in clear, base64-encoded, on a last line without
// a newline) and panics, or exits, quoting it, shows it nowhere: not on
// migrate's stderr, not in the failed call's error, not in the message
// that says the program died; nor a secret it made (a sensitive output)
// and printed later. (Not parallel: it sets where programs'
// stderr goes.)
func TestStderrAndPanicsAreScrubbed(t *testing.T) {
	const canary = "CANARY-plugin-7e1d"
	var out lockedBuffer
	defer plugin.SetStderr(&out)()
	p := configured(t, program(t))
	call := func(value string) string {
		t.Helper()
		r := p.Apply(context.Background(), providers.ApplyRequest{Type: fake.StepType, Addr: phases.Address{Type: fake.StepType, Name: "a"},
			Config: stepConfig(cty.StringVal(value).Mark(phases.SensitiveMark))})
		if !r.Diagnostics.HasErrors() {
			t.Fatalf("apply of %s succeeded", value)
		}
		return r.Diagnostics.Err().Error()
	}
	panicked := call("leak-" + canary)
	for _, v := range []string{"mint", "say-minted"} {
		if r := apply(context.Background(), p, v, nil); r.Diagnostics.HasErrors() {
			t.Fatalf("%s: %v", v, r.Diagnostics.Err())
		}
	}
	died := call("leak-exit-" + canary)
	p.(providers.Closer).Close() // all of its stderr has arrived
	for what, text := range map[string]string{"stderr": out.String(), "the panic's error": panicked, "the death's error": died} {
		if strings.Contains(text, canary) || strings.Contains(text, "CANARY") {
			t.Errorf("%s shows the secret:\n%s", what, text)
		}
	}
	if got := out.String(); !strings.Contains(got, "panic in apply: cannot use "+phases.Redacted) || !strings.Contains(got, "last words: "+phases.Redacted) ||
		!strings.Contains(got, "said: "+phases.Redacted) {
		t.Errorf("stderr lacks the panic or the last line, scrubbed:\n%s", got)
	}
	if !strings.Contains(panicked, "panicked") || !strings.Contains(died, "last words: "+phases.Redacted) {
		t.Errorf("the errors do not say what happened:\n%s\n%s", panicked, died)
	}
}
