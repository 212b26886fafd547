package kubecp

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRILog: a container's output kept in the CRI's format (a record per
// line, P for a piece of a line) reads back as written, and tailLines
// counts lines, not records; limitBytes cuts.
func TestCRILog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "0.log")

	l, err := openCRILog(path)
	if err != nil {
		t.Fatal(err)
	}

	for _, w := range []struct{ stream, text string }{{"stdout", "one\ntw"}, {"stderr", "o\n"}, {"stdout", "three\nfour"}} {
		if _, err := l.stream(w.stream).Write([]byte(w.text)); err != nil {
			t.Fatal(err)
		}
	}

	l.Close() //nolint:errcheck

	b, _ := os.ReadFile(path) //nolint:errcheck
	if recs := strings.Split(strings.TrimSpace(string(b)), "\n"); len(recs) != 5 || !strings.HasSuffix(recs[1], " stdout P tw") || !strings.HasSuffix(recs[2], " stderr F o") {
		t.Fatalf("the CRI log:\n%s", b)
	}

	c := &ControlPlane{}

	for query, want := range map[string]string{
		"":              "one\ntwo\nthree\nfour",
		"tailLines=2":   "two\nthree\nfour",
		"tailLines=0":   "four",
		"limitBytes=5":  "one\nt",
		"tailLines=all": "",
	} {
		q, _ := url.ParseQuery(query) //nolint:errcheck

		opts, err := parseLogOptions(q)
		if query == "tailLines=all" {
			if err == nil {
				t.Errorf("tailLines=all: no error")
			}

			continue
		}

		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}

		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}

		rec := httptest.NewRecorder()
		c.writeLog(context.Background(), rec, f, path, opts)
		f.Close() //nolint:errcheck

		if rec.Body.String() != want {
			t.Errorf("?%s: %q, want %q", query, rec.Body.String(), want)
		}
	}
}

// TestLogOptionsBad: what kubelet refuses is refused, saying what.
func TestLogOptionsBad(t *testing.T) {
	for query, want := range map[string]string{
		"follow=maybe":     `follow="maybe" is not a boolean`,
		"tailLines=-1":     `tailLines="-1" is not a number of zero or more`,
		"limitBytes=x":     `limitBytes="x" is not a number`,
		"sinceSeconds=0":   `sinceSeconds="0" is not a positive number`,
		"sinceTime=monday": `sinceTime="monday" is not an RFC 3339 time`,
		"previous=perhaps": `previous="perhaps" is not a boolean`,
	} {
		q, _ := url.ParseQuery(query) //nolint:errcheck
		if _, err := parseLogOptions(q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", query, err, want)
		}
	}
}
