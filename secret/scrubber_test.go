package secret_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

func TestScrubberReplacesLongestFirstAndQuotedForms(t *testing.T) {
	t.Parallel()
	var s secret.Scrubber
	if s.Active() || s.Text("nothing") != "nothing" {
		t.Fatal("an empty scrubber changes text")
	}
	s.Add("abc", "abcdef", `q"uote`, "")
	got := s.Text(`token=abcdef other=abc json={"v":"q\"uote"}`)
	want := `token=(sensitive value) other=(sensitive value) json={"v":"(sensitive value)"}`
	if got != want {
		t.Errorf("Text = %q\nwant   %q", got, want)
	}
}

func TestScrubberMinAndFilter(t *testing.T) {
	t.Parallel()
	s := secret.Scrubber{Min: 4, Filter: strings.ToUpper}
	s.Add("ab", "long-secret")
	if got := s.Text("ab long-secret"); got != "AB (SENSITIVE VALUE)" {
		t.Errorf("Text = %q", got)
	}
}

func TestMarkedFindsOnlyMarkedLeaves(t *testing.T) {
	t.Parallel()
	v := cty.ObjectVal(map[string]cty.Value{
		"plain": cty.StringVal("visible"),
		"token": cty.StringVal("hidden-token").Mark(phases.SensitiveMark),
		"nested": cty.TupleVal([]cty.Value{
			cty.StringVal("also-visible"),
			cty.NumberIntVal(424242).Mark(phases.SensitiveMark),
		}),
		"whole": cty.MapVal(map[string]cty.Value{"k": cty.StringVal("map-secret")}).Mark(phases.SensitiveMark),
	})
	got := strings.Join(secret.Marked(v), ",")
	for _, want := range []string{"hidden-token", "424242", "map-secret"} {
		if !strings.Contains(got, want) {
			t.Errorf("Marked = %s, lacks %s", got, want)
		}
	}
	if strings.Contains(got, "visible") {
		t.Errorf("Marked = %s includes unmarked values", got)
	}
	var s secret.Scrubber
	s.AddMarked(v)
	if s.Text("hidden-token visible") != "(sensitive value) visible" {
		t.Errorf("AddMarked did not learn the marked value")
	}
}

func TestWriterCatchesSecretsSplitAcrossWrites(t *testing.T) {
	t.Parallel()
	var s secret.Scrubber
	s.Add("CANARY-123")
	var out bytes.Buffer
	w := secret.NewWriter(&out, &s)
	w.Write([]byte("logging in with CAN"))
	w.Write([]byte("ARY-123\nand a last line CANARY-123"))
	w.Flush()
	if strings.Contains(out.String(), "CANARY") || !strings.Contains(out.String(), "and a last line (sensitive value)") {
		t.Errorf("output = %q", out.String())
	}
}

func TestScrubberIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	var s secret.Scrubber
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Add(strings.Repeat("x", 5+i))
			_ = s.Text("some text xxxxxxxx")
		}()
	}
	wg.Wait()
}

// A secret that reached a command inside a larger string is scrubbed by
// its words too: the command prints the derived word, not the whole.
func TestScrubberScrubsTheWordsOfALongerSecret(t *testing.T) {
	var s secret.Scrubber
	s.Add("echo CNRY7Q4ZXW9KPL2M >&2; exit 3", "TOKEN=hunter2hunter2")
	for in, want := range map[string]string{
		"CNRY7Q4ZXW9KPL2M":              phases.Redacted,
		"token hunter2hunter2 used":     "token " + phases.Redacted + " used",
		"echo and exit are not secrets": "echo and exit are not secrets",
	} {
		if got := s.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

// A document whose secrets are listed (phases.SecretParts: a machine
// config) is scrubbed whole and by its parts, in their forms, but its
// other words stay: they are no secret. The same mark on another text
// (the document transformed) is ignored: that text is learned word by
// word, as any secret.
func TestAddMarkedDocumentLearnsItsParts(t *testing.T) {
	t.Parallel()
	const doc = "machine:\n  token: abcdef.0123456789abcdef\n  hostname: talos-home\n"
	parts := []string{"abcdef.0123456789abcdef"}
	var s secret.Scrubber
	s.AddMarked(cty.StringVal(doc).Mark(phases.SensitiveMark).Mark(phases.NewSecretParts(doc, parts)))
	for in, want := range map[string]string{
		"node talos-home":                  "node talos-home",
		"  token: abcdef.0123456789abcdef": "  token: (sensitive value)",
		"x " + base64.StdEncoding.EncodeToString([]byte("abcdef.0123456789abcdef")): "x (sensitive value)",
		"[" + doc + "]": "[(sensitive value)]",
	} {
		if got := s.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
	// inside a value marked sensitive whole (sensitive() of an object)
	var within secret.Scrubber
	within.AddMarked(cty.ObjectVal(map[string]cty.Value{
		"user_data": cty.StringVal(doc).Mark(phases.NewSecretParts(doc, parts)),
		"other":     cty.StringVal("an other secret"),
	}).Mark(phases.SensitiveMark))
	if got := within.Text("talos-home abcdef.0123456789abcdef an other secret"); got != "talos-home (sensitive value) (sensitive value)" {
		t.Errorf("a document inside a sensitive object: %q", got)
	}
	var other secret.Scrubber
	upper := strings.ToUpper(doc)
	other.AddMarked(cty.StringVal(upper).Mark(phases.SensitiveMark).Mark(phases.NewSecretParts(doc, parts)))
	if got := other.Text("TALOS-HOME"); got != phases.Redacted {
		t.Errorf("a mark made for another text is trusted: %q", got)
	}
}
