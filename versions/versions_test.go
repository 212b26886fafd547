package versions_test

import (
	"testing"

	"github.com/homelab-migrate/migrate/versions"
)

// TestCompare: a Debian package's version against an image's tag, as the
// old VMs and the registries write them.
func TestCompare(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b string
		want int
	}{
		{"10.10.7+deb12", "10.10.7", 0},
		{"10.10.7+deb12", "10.10.3", 1},
		{"10.10.3", "10.10.7+deb12", -1},
		{"1.120.2+bookworm1", "v1.120.2", 0},
		{"1.120.2+bookworm1", "v1.120", 1},
		{"v1.120", "1.120.0", 0},
		{"1.121.0~rc1", "v1.121.0rc1", 0},
		{"1.121.0~rc1", "v1.121.0", -1},
		{"1.121.0~rc1", "1.120.2", 1},
		{"0.14.0-beta3", "0.14.0-rc1", -1},
		{"0.14.1-f4f3cfa", "0.14.1", 0},
		{"0.14.1-a1b2c3d", "0.14.1", 0}, // a commit, not an alpha
		{"1.0a1", "1.0", -1},
		{"0.14.1-tensorrt", "0.14.1", 0},
		{"1:10.10.7-1", "10.10.7", 0},
		{"10.10.10", "10.10.9", 1},
		{"99999999999999999999999", "1", 1},
	}
	for _, c := range cases {
		got, ok := versions.Compare(c.a, c.b)
		if !ok || got != c.want {
			t.Errorf("Compare(%q, %q) = %d, %v; want %d", c.a, c.b, got, ok, c.want)
		}
	}
	for _, s := range []string{"latest", "stable", "", "sha256:abc"} {
		if _, ok := versions.Compare(s, "1.0"); ok {
			t.Errorf("Compare(%q, 1.0) compared: %q is no version", s, s)
		}
	}
}

func TestTag(t *testing.T) {
	t.Parallel()
	for image, want := range map[string][2]string{
		"jellyfin/jellyfin:10.10.7":                    {"jellyfin/jellyfin", "10.10.7"},
		"ghcr.io/blakeblackshear/frigate:0.14.1":       {"ghcr.io/blakeblackshear/frigate", "0.14.1"},
		"registry:5000/app":                            {"registry:5000/app", ""},
		"registry:5000/app:v2@sha256:0123":             {"registry:5000/app", "v2"},
		"matrixdotorg/synapse":                         {"matrixdotorg/synapse", ""},
		"localhost:5000/matrixdotorg/synapse:v1.120.2": {"localhost:5000/matrixdotorg/synapse", "v1.120.2"},
	} {
		if r, tag := versions.Repository(image), versions.Tag(image); r != want[0] || tag != want[1] {
			t.Errorf("%s: repository %q tag %q, want %q %q", image, r, tag, want[0], want[1])
		}
	}
}

// FuzzCompare: Compare is an order: no panic, a version equals itself,
// swapping the two turns the answer round, and it is transitive.
func FuzzCompare(f *testing.F) {
	for _, s := range [][3]string{
		{"10.10.7+deb12", "10.10.3", "v10.10.7"},
		{"1.121.0~rc1", "1.121.0-rc2", "1.121.0"},
		{"1:2.0~beta1-3", "2.0a1", "2.0.0.0"},
		{"0.14.1-a1", "0.14.1b2", "latest"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		ab, okA := versions.Compare(a, b)
		ba, _ := versions.Compare(b, a)
		if okA && ab != -ba {
			t.Fatalf("Compare(%q, %q) = %d but Compare(%q, %q) = %d", a, b, ab, b, a, ba)
		}
		if aa, ok := versions.Compare(a, a); ok && aa != 0 {
			t.Fatalf("Compare(%q, itself) = %d", a, aa)
		}
		bc, okB := versions.Compare(b, c)
		ac, okC := versions.Compare(a, c)
		if okA && okB && okC && ab <= 0 && bc <= 0 && ac > 0 {
			t.Fatalf("%q <= %q <= %q but %q > %q", a, b, c, a, c)
		}
		if v, ok := versions.Parse(a); ok {
			if again, ok := versions.Parse(v.String()); !ok || again.Compare(v) != 0 {
				t.Fatalf("%q parsed as %v; its String %q parses as %v", a, v, v.String(), again)
			}
		}
	})
}
