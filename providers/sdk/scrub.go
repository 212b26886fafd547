package sdk

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

// scrubber scrubs what leaves a provider. A secret is replaced wherever
// it appears, except inside a string the runbook itself wrote in clear
// (a revert command that compares a sensitive variable with its literal
// value): that string is no secret, and rewriting it would break the
// data that carries it.
type scrubber struct {
	s      *secret.Scrubber
	public []string
}

func (sc *scrubber) text(t string) string {
	if t == "" || !sc.s.Active() {
		return t
	}
	var keep []string
	for _, p := range sc.public {
		if sc.s.Text(p) == p {
			continue
		}
		for _, form := range []string{p, quoted(p)} {
			if strings.Contains(t, form) {
				keep = append(keep, form)
			}
		}
	}
	if len(keep) == 0 {
		return sc.s.Text(t)
	}
	// Set the public strings aside under place-holders no secret can
	// match, scrub, then put them back.
	pairs, back := make([]string, 0, 2*len(keep)), make([]string, 0, 2*len(keep))
	for i, k := range keep {
		ph := fmt.Sprintf("\x00%d\x00", i)
		pairs = append(pairs, k, ph)
		back = append(back, ph, k)
	}
	t = strings.NewReplacer(pairs...).Replace(t)
	return strings.NewReplacer(back...).Replace(sc.s.Text(t))
}

func quoted(s string) string {
	q, _ := json.Marshal(s)
	return string(q[1 : len(q)-1])
}

func (sc *scrubber) diags(d phases.Diagnostics) phases.Diagnostics {
	for i := range d {
		d[i].Summary = sc.text(d[i].Summary)
		d[i].Detail = sc.text(d[i].Detail)
		for j, v := range d[i].Values {
			d[i].Values[j] = sc.text(v)
		}
	}
	return d
}

func (sc *scrubber) record(r map[string]string) map[string]string {
	if r == nil {
		return nil
	}
	out := make(map[string]string, len(r))
	for k, v := range r {
		out[sc.text(k)] = sc.text(v)
	}
	return out
}

// outputs marks sensitive every string of v that contains a secret: a
// later step may still use it, and the state and the terminal redact it.
func (sc *scrubber) outputs(v cty.Value) cty.Value {
	if v == cty.NilVal || !sc.s.Active() {
		return v
	}
	out, _ := cty.Transform(v, func(_ cty.Path, x cty.Value) (cty.Value, error) {
		u, _ := x.Unmark()
		if u.Type() == cty.String && u.IsKnown() && !u.IsNull() && sc.text(u.AsString()) != u.AsString() {
			return x.Mark(phases.SensitiveMark), nil
		}
		return x, nil
	})
	return out
}

// encode turns typed data into the JSON that leaves the provider,
// scrubbed; the zero value is no data.
func (sc *scrubber) encode(v any) (json.RawMessage, error) {
	if isZero(v) {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(sc.text(string(b))), nil
}
