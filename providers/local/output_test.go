package local_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/local"
)

// TestExecTailNeverStartsInsideASecret: the last output an error quotes
// is kept in a ring of 2048 bytes; when the ring begins inside a secret,
// the end of the secret, which alone the scrubbing cannot recognise, is
// not shown.
func TestExecTailNeverStartsInsideASecret(t *testing.T) {
	t.Parallel()
	const s = "tail-canary-0123456789abcdef"
	p := configured(t, local.New(), t.TempDir())
	for _, inside := range []int{1, 12, len(s) - 1} {
		// The secret, then as many y as leave its last bytes in the ring,
		// in writes of their own and in one write.
		ys := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' y`, 2048-inside)
		before := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x`, 2048-len(s)+inside) // 4096 bytes in all
		for _, script := range []string{
			`printf '%s' "$T"; ` + ys + `; exit 3`,
			`printf '%s%s' "$T" "$(` + ys + `)"; exit 3`,
			before + `; printf '%s' "$T"; ` + ys + `; exit 3`,
		} {
			cfg := obj(map[string]cty.Value{
				"command": strs("sh", "-c", script),
				"env":     cty.MapVal(map[string]cty.Value{"T": cty.StringVal(s).Mark(phases.SensitiveMark)}),
			})
			r := apply(context.Background(), p, "exec", "x", cfg, io.Discard)
			err := r.Diagnostics.Err()
			if err == nil {
				t.Fatal("the command did not fail")
			}
			_, tail, ok := strings.Cut(err.Error(), "Last lines of output:")
			if !ok {
				t.Fatalf("no output quoted: %v", err)
			}
			if rest := strings.Trim(tail, "y. \n"); rest != "" {
				t.Errorf("%d bytes of the secret in the ring (%s): the quoted output shows %q", inside, script, rest)
			}
		}
	}
}
