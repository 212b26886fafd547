package engine

import "testing"

func TestContradiction(t *testing.T) {
	for _, c := range []struct {
		saved, fresh string
		bad          string
	}{
		{"run: echo (known after exec.first)", "run: echo 'code 0'", ""},
		{"run: echo (known after exec.first)", "run: printf 'code 0'", "run: echo (known after exec.first)"},
		{"a: 1\nb: (known after x.y) and (known after x.z)!\nc: 3", "a: 1\nextra\nb: 2 and 3!\nc: 3", ""},
		{"a: 1\nc: 3", "c: 3\na: 1", "c: 3"},
		{"ip: (known after incus_instance.talos)", "ip: 10.0.0.5\nport: 50000", ""},
		{"", "anything", ""},
		{"value: (x)", "value: (y)", "value: (x)"},
	} {
		line, bad := contradiction(c.saved, c.fresh)
		if bad != (c.bad != "") || line != c.bad {
			t.Errorf("contradiction(%q, %q) = %q, %v; want %q", c.saved, c.fresh, line, bad, c.bad)
		}
	}
}
