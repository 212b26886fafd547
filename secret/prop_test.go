package secret_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

// TestWriterNeverPassesASecret: random streams of short and very long
// lines, with secrets (one spanning lines) at random places and written
// in random pieces, come out with every secret replaced, every other
// byte in its place, and no line longer than the cap.
func TestWriterNeverPassesASecret(t *testing.T) {
	t.Parallel()
	secrets := []string{"S3CRET-one-aaaa", "two\nlines-Q", "x'y\"z"}
	var s secret.Scrubber
	s.Add(secrets...)
	rng := rand.New(rand.NewPCG(7, 27))
	for round := range 40 {
		var in, want strings.Builder
		for range 30 {
			switch rng.IntN(4) {
			case 0:
				x := secrets[rng.IntN(len(secrets))]
				in.WriteString(x)
				want.WriteString(phases.Redacted)
			case 1:
				in.WriteString("\n")
				want.WriteString("\n")
			default:
				n := rng.IntN(3) * rng.IntN(60000)
				if rng.IntN(2) == 0 {
					n = rng.IntN(12)
				}
				filler := strings.Repeat("_", n)
				in.WriteString(filler)
				want.WriteString(filler)
			}
		}
		var out lineStats
		out.keep = true
		w := secret.NewWriter(&out, &s)
		text := []byte(in.String())
		for len(text) > 0 {
			n := min(len(text), 1+rng.IntN([]int{7, 40000}[rng.IntN(2)]))
			w.Write(text[:n])
			text = text[n:]
		}
		w.Flush()
		got := out.text.String()
		for _, x := range secrets {
			if strings.Contains(got, x) {
				t.Fatalf("round %d: %q passed on", round, x)
			}
		}
		if out.longest > 2*lineCap { // a secret shorter than its mark lengthens its line

			t.Errorf("round %d: a line of %d bytes", round, out.longest)
		}
		// Cut lines gain a note and newlines: without them, the text is
		// what was written, scrubbed.
		plain := strings.ReplaceAll(strings.ReplaceAll(got, "(the next line is longer than 64 KiB: it is cut into lines of 64 KiB)\n", ""), "\n", "")
		if plain != strings.ReplaceAll(want.String(), "\n", "") {
			t.Errorf("round %d: the text changed beyond its secrets (%d bytes, want %d)", round, len(plain), len(strings.ReplaceAll(want.String(), "\n", "")))
		}
	}
}
